"""Configuration spaces: the knobs a template defines and one point (a config) in their product.

A template calls ``cfg.define_split / define_reorder / define_annotate / define_knob`` and then
reads ``cfg["name"]``. The same template code runs against three kinds of ``cfg``:

- ``ConfigSpace`` while a task is created: each ``define_*`` records a knob, and ``cfg[name]``
  answers with the knob's first entity so the template body still runs to the end;
- ``ConfigEntity`` while building a candidate: ``define_*`` does nothing, ``cfg[name]`` is the
  chosen entity;
- ``FallbackConfigEntity`` when nothing was tuned: ``define_*`` records the knob and picks a
  reasonable default, which the template may refine with ``cfg.fallback_split``.

A config's index is a mixed-radix number over the knobs in definition order, first knob fastest.
"""

from __future__ import annotations

import math

from kiln.errors import TuningError

from .knobs import (AnnotateEntity, AnnotateSpace, OtherOptionEntity, OtherOptionSpace,
                    ReorderEntity, ReorderSpace, SplitEntity, SplitSpace, VirtualAxis,
                    entity_from_json)

__all__ = ["ConfigSpace", "ConfigEntity", "FallbackConfigEntity", "SplitEntity", "ReorderEntity",
           "AnnotateEntity", "OtherOptionEntity", "VirtualAxis"]


_MISSING = object()


class _ConfigBase:
    """What every kind of cfg offers a template: flop counting and the target being built for."""

    def __init__(self):
        self.flop = 0.0
        self.is_fallback = False

    def add_flop(self, flop) -> None:
        """Count floating-point operations of this workload (GFLOPS = flop / seconds / 1e9)."""
        self.flop += float(flop)

    @staticmethod
    def axis(var):
        """A virtual axis for ``define_split``/``define_reorder`` from an IterVar or a length."""
        return var if isinstance(var, VirtualAxis) else VirtualAxis(var)

    reduce_axis = axis


class ConfigSpace(_ConfigBase):
    """The product of a template's knobs. ``len(space)``, ``space.get(i)``, ``space.knobs``.

    >>> cfg = autotvm.get_config()          # a ConfigSpace while the task is being created
    >>> cfg.define_split("tile_x", x, num_outputs=2)
    >>> xo, xi = cfg["tile_x"].apply(s, C, x)
    """

    def __init__(self):
        super().__init__()
        self.space_map: dict[str, object] = {}
        self._first: dict[str, object] = {}
        self.template_key = None
        self.code_hash = None
        self.default_values: dict[str, object] = {}
        self.layout_knobs: tuple = ()

    # -- defining knobs ----------------------------------------------------------------------
    def define_split(self, name: str, axis, num_outputs: int = 2, policy: str = "factors",
                     filter=None, max_factor: int | None = None, **kwargs):
        """Split ``axis`` into ``num_outputs`` loops. policy: "factors" (exact divisors),
        "power2" (powers of two; the outer loop takes the remainder), "verbose" (both)."""
        if kwargs:
            raise TuningError(f"define_split {name!r}: unknown options {sorted(kwargs)}; "
                              "supported: num_outputs, policy, filter, max_factor")
        return self._add(name, SplitSpace(_length(axis, name), num_outputs, policy, filter, max_factor))

    def define_reorder(self, name: str, axes, policy: str = "all", candidate=None):
        """Permutations of ``axes``: policy "all", "identity" or "candidate" (a list of orders)."""
        return self._add(name, ReorderSpace(len(axes), policy, candidate, axes))

    def define_annotate(self, name: str, axes, policy: str, max_unroll: int | None = None):
        """Per-axis annotations: policy "try_unroll", "try_vec" or "try_unroll_vec"."""
        return self._add(name, AnnotateSpace(len(axes), policy, max_unroll))

    def define_knob(self, name: str, candidate):
        """A free choice among ``candidate`` values (ints, floats, strings, bools)."""
        return self._add(name, OtherOptionSpace(candidate))

    def define_default(self, values: dict) -> None:
        """The knob values the template uses when nothing is tuned (kiln's addition). Every tuner
        measures that config first, so tuning ends at least as fast as the untuned kernel."""
        self.default_values.update(values)

    def define_layout(self, *names: str) -> None:
        """Declare the knobs that change the shapes of the kernel's arguments (kiln's addition;
        e.g. conv2d_NCHWc's output block ``oc_bn``). ``check_correctness`` compares such a
        candidate with the untuned kernel built in the same layout (``layout_variant``)."""
        self.layout_knobs = tuple(dict.fromkeys(self.layout_knobs + names))

    def layout_variant(self, config) -> "ConfigEntity | None":
        """The declared default config with ``config``'s layout knobs: the untuned kernel in the
        layout of ``config``. None if the template declared no default."""
        base = self.default_index()
        if base is None:
            return None
        genes = self.knob_indices(base)
        chosen = self.knob_indices(config.index)
        for k, name in enumerate(self.space_map):
            if name in self.layout_knobs:
                genes[k] = chosen[k]
        return self.get(self.index_of(genes))

    def default_index(self) -> int | None:
        """The index of the declared default config, or None when the template declared none or
        a value lies outside its knob's candidates. A knob with one candidate needs no value."""
        if not self.default_values:
            return None
        genes = []
        for name, knob in self.space_map.items():
            if len(knob) == 1:
                genes.append(0)
                continue
            want = self.default_values.get(name, _MISSING)
            if want is _MISSING:
                return None
            # a split's value is its size list ([-1, ...], as the space enumerates it)
            values = [getattr(e, "val", getattr(e, "size", _MISSING)) for e in map(knob.entity, range(len(knob)))]
            # type-strict, so that True does not match 1
            hits = [i for i, v in enumerate(values) if type(v) is type(want) and v == want]
            if not hits:
                return None
            genes.append(hits[0])
        return self.index_of(genes)

    def _add(self, name: str, knob):
        if name in self.space_map:
            # Templates that call define_* in a loop over stages redefine the same knob.
            return self._first[name]
        if len(knob) == 0:
            raise TuningError(f"knob {name!r} has no valid choices; loosen its filter or "
                              "max_factor")
        self.space_map[name] = knob
        self._first[name] = knob.entity(0)
        return self._first[name]

    # -- reading -----------------------------------------------------------------------------
    def __getitem__(self, name: str):
        if name not in self._first:
            raise TuningError(f"the template reads knob {name!r} before defining it; call "
                              f"cfg.define_*({name!r}, ...) first")
        return self._first[name]

    def __len__(self) -> int:
        return math.prod(len(k) for k in self.space_map.values()) if self.space_map else 1

    @property
    def knobs(self) -> dict[str, object]:
        """Knob name -> its space (each has ``len`` and ``entity(i)``), in definition order."""
        return dict(self.space_map)

    @property
    def dims(self) -> list[int]:
        return [len(k) for k in self.space_map.values()]

    def knob_indices(self, index: int) -> list[int]:
        """The per-knob choice of config ``index`` (first knob fastest)."""
        if not 0 <= index < len(self):
            raise TuningError(f"config index {index} is outside the space of {len(self)} configs")
        out = []
        for dim in self.dims:
            out.append(index % dim)
            index //= dim
        return out

    def index_of(self, knob_indices) -> int:
        index, scale = 0, 1
        for i, dim in zip(knob_indices, self.dims):
            index += i * scale
            scale *= dim
        return index

    def get(self, index: int) -> "ConfigEntity":
        """The config at ``index`` (0 <= index < len(space))."""
        entities = {name: knob.entity(i) for (name, knob), i
                    in zip(self.space_map.items(), self.knob_indices(index))}
        return ConfigEntity(index, self.code_hash, entities, self)

    def __iter__(self):
        return (self.get(i) for i in range(len(self)))

    def __repr__(self) -> str:
        lines = [f"ConfigSpace (len={len(self)}, space_map=\n"]
        for i, (name, knob) in enumerate(self.space_map.items()):
            lines.append(f"   {i:2d} {name}: {knob!r}\n")
        return "".join(lines) + ")"


class ConfigEntity(_ConfigBase):
    """One point of a space: ``index``, the entity of every knob, ``to_json_dict()``."""

    def __init__(self, index: int, code_hash, entity_map: dict, space: ConfigSpace | None = None):
        super().__init__()
        self.index = int(index)
        self.code_hash = code_hash
        self._entity_map = dict(entity_map)
        self._space = space

    # define_* are no-ops: the space is fixed, the choice is made.
    def define_split(self, name, *args, **kwargs):
        return self._entity_map.get(name)

    define_reorder = define_annotate = define_knob = define_split

    def define_default(self, values: dict) -> None:
        del values

    def define_layout(self, *names: str) -> None:
        del names

    def __getitem__(self, name: str):
        try:
            return self._entity_map[name]
        except KeyError:
            raise TuningError(f"config {self.index} has no knob {name!r}; the template changed "
                              "since this config was recorded (knobs: "
                              f"{sorted(self._entity_map)})") from None

    def get(self, name: str, default=None):
        return self._entity_map.get(name, default)

    def items(self):
        return self._entity_map.items()

    def get_flatten_feature(self) -> list[float]:
        """Numbers describing this config for the "knob" cost-model features."""
        out: list[float] = []
        for entity in self._entity_map.values():
            out.extend(entity.features())
        return out

    def get_other_option(self) -> dict:
        return {k: v.val for k, v in self._entity_map.items() if isinstance(v, OtherOptionEntity)}

    def __getstate__(self):
        # Sent to build processes: the space it came from is not needed there.
        state = dict(self.__dict__)
        state["_space"] = None
        return state

    def to_json_dict(self) -> dict:
        return {"index": self.index, "code_hash": self.code_hash,
                "entity": [[name, e.KIND, e.to_json()] for name, e in self._entity_map.items()]}

    @staticmethod
    def from_json_dict(data: dict) -> "ConfigEntity":
        try:
            entities = {name: entity_from_json(kind, value) for name, kind, value in data["entity"]}
            return ConfigEntity(int(data["index"]), data.get("code_hash"), entities)
        except (KeyError, TypeError, ValueError) as e:
            raise TuningError(f"bad config record {data!r}: {e}. The log is corrupt or from an "
                              "incompatible version; re-run tuning") from None

    def __str__(self) -> str:
        body = ",".join(f"('{name}', {e})" for name, e in self._entity_map.items())
        return f"[{body}],{self.code_hash},{self.index}"

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return isinstance(other, ConfigEntity) and self.to_json_dict() == other.to_json_dict()

    def __hash__(self) -> int:
        return hash(str(self))


class FallbackConfigEntity(ConfigSpace):
    """The config used when no tuned one is known: each knob takes a default the template can
    refine (``cfg.fallback_split("tile_x", [-1, 8])``)."""

    def __init__(self):
        super().__init__()
        self.is_fallback = True
        self.index = -1

    def _add(self, name: str, knob):
        entity = super()._add(name, knob)
        if isinstance(knob, SplitSpace) and name not in getattr(self, "_refined", set()):
            # Untuned default: no tiling (every inner factor 1). Cheap to build, always valid.
            self._first[name] = SplitEntity([-1] + [1] * (knob.num_outputs - 1))
            entity = self._first[name]
        return entity

    def fallback_split(self, name: str, constraints) -> None:
        """Pick for split knob ``name`` the valid factors closest to ``constraints`` (from the
        innermost factor outwards); -1 leaves a factor free."""
        knob = self.space_map.get(name)
        if not isinstance(knob, SplitSpace):
            raise TuningError(f"fallback_split: {name!r} is not a split knob defined so far")
        self._first[name] = knob.closest(constraints)
        self._refined = getattr(self, "_refined", set()) | {name}

    def fallback_with_reference_log(self, ref_log) -> None:
        """Copy the knob values of the most similar tuned workload's best config."""
        del ref_log  # kiln's templates refine their fallbacks by hand with fallback_split.

    def __setitem__(self, name: str, entity) -> None:
        self._first[name] = entity

    def get_flatten_feature(self) -> list[float]:
        return [v for e in self._first.values() for v in e.features()]

    def to_json_dict(self) -> dict:
        return {"index": -1, "code_hash": None,
                "entity": [[n, e.KIND, e.to_json()] for n, e in self._first.items()]}

    def __str__(self) -> str:
        body = ",".join(f"('{n}', {e})" for n, e in self._first.items())
        return f"[{body}],None,fallback"


def _length(axis, name: str) -> int:
    if isinstance(axis, VirtualAxis):
        return axis.length
    return VirtualAxis(axis, name).length

