"""The knob kinds of a config space: each a space (enumerates choices) and an entity (one choice
that knows how to apply itself to a schedule).

Kinds, with their record tags: split ("sp"), reorder ("re"), annotate ("an"), other ("ot").
"""

from __future__ import annotations

import itertools
import math
import zlib

from kiln.errors import TuningError


class VirtualAxis:
    """An axis of a given length for the space's bookkeeping (from an IterVar or an int)."""

    def __init__(self, var, name: str = ""):
        if isinstance(var, int):
            self.length, self.name = var, name or "axis"
            return
        dom = getattr(var, "dom", None)
        extent = getattr(getattr(dom, "extent", None), "value", None)
        if extent is None:
            raise TuningError(f"knob {name!r}: axis {var!r} has no constant extent (it was made by "
                              "split/fuse or is symbolic); pass its length as an int instead")
        self.length, self.name = int(extent), var.var.name


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _powers_of_two(n: int) -> list[int]:
    return [1 << i for i in range(n.bit_length()) if (1 << i) <= n]


# -- split ---------------------------------------------------------------------------------------

class SplitEntity:
    """Loop sizes from outermost to innermost; -1 (first) means "whatever remains"."""

    KIND = "sp"

    def __init__(self, size):
        self.size = [int(s) for s in size]

    def apply(self, sch, op, axis):
        """Split ``axis`` of stage ``op``; returns the new loops, outermost first."""
        inners = []
        for factor in reversed(self.size[1:]):
            axis, inner = sch[op].split(axis, factor=factor)
            inners.append(inner)
        return [axis] + inners[::-1]

    def features(self) -> list[float]:
        return [math.log2(s) if s > 0 else 0.0 for s in self.size[1:]]

    def to_json(self):
        return list(self.size)

    def __str__(self):
        return str(self.size)

    __repr__ = __str__

    def __eq__(self, other):
        return isinstance(other, SplitEntity) and self.size == other.size

    def __hash__(self):
        return hash(tuple(self.size))


class SplitSpace:
    def __init__(self, length: int, num_outputs: int, policy: str, filter, max_factor):
        if num_outputs < 1:
            raise TuningError(f"define_split: num_outputs must be >= 1, got {num_outputs}")
        if policy not in ("factors", "power2", "verbose"):
            raise TuningError(f"define_split: unknown policy {policy!r}; use 'factors', 'power2' "
                              "or 'verbose'")
        self.length, self.num_outputs, self.policy = length, num_outputs, policy
        limit = max_factor or length
        self.entities = [e for e in self._enumerate(limit) if filter is None or filter(e)]

    def _candidates(self, remaining: int, limit: int) -> list[int]:
        if self.policy == "factors":
            return [d for d in _divisors(remaining) if d <= limit]
        cands = set(_powers_of_two(remaining))
        if self.policy == "verbose":
            cands |= set(_divisors(remaining))
        return sorted(c for c in cands if c <= limit)

    def _enumerate(self, limit: int):
        def inner(levels: int, remaining: int):
            if levels == 0:
                yield []
                return
            for f in self._candidates(remaining, limit):
                # Only "factors" needs exact division; the others leave a ragged outer loop.
                rest = remaining // f if self.policy == "factors" else max(1, remaining // f)
                for tail in inner(levels - 1, rest):
                    yield [f] + tail
        for factors in inner(self.num_outputs - 1, self.length):
            yield SplitEntity([-1] + factors[::-1])

    def __len__(self):
        return len(self.entities)

    def entity(self, i: int) -> SplitEntity:
        return self.entities[i]

    def closest(self, constraints) -> SplitEntity:
        want = list(constraints)
        if len(want) != self.num_outputs:
            raise TuningError(f"fallback_split: {len(want)} sizes given for a split into "
                              f"{self.num_outputs}")

        def distance(e: SplitEntity) -> float:
            return sum(abs(math.log2(have) - math.log2(w)) for have, w in zip(e.size[1:], want[1:])
                       if w > 0)
        return min(self.entities, key=distance)

    def __repr__(self):
        return (f"Split(policy={self.policy}, product={self.length}, "
                f"num_outputs={self.num_outputs}) len={len(self)}")


# -- reorder -------------------------------------------------------------------------------------

class ReorderEntity:
    KIND = "re"

    def __init__(self, perm):
        self.perm = [int(p) for p in perm]

    def apply(self, sch, op, axes):
        ordered = [axes[i] for i in self.perm]
        sch[op].reorder(*ordered)
        return ordered

    def features(self) -> list[float]:
        return [float(p) for p in self.perm]

    def to_json(self):
        return list(self.perm)

    def __str__(self):
        return str(self.perm)

    __repr__ = __str__


class ReorderSpace:
    def __init__(self, n: int, policy: str, candidate, axes):
        if policy == "all":
            perms = list(itertools.permutations(range(n)))
        elif policy == "identity":
            perms = [tuple(range(n))]
        elif policy == "candidate":
            if not candidate:
                raise TuningError("define_reorder(policy='candidate') needs candidate=[[axes...], ...]")
            index = {id(a): i for i, a in enumerate(axes)}
            perms = [tuple(index[id(a)] for a in order) for order in candidate]
        else:
            raise TuningError(f"define_reorder: unknown policy {policy!r}; use 'all', 'identity' "
                              "or 'candidate'")
        self.entities = [ReorderEntity(p) for p in perms]

    def __len__(self):
        return len(self.entities)

    def entity(self, i: int) -> ReorderEntity:
        return self.entities[i]

    def __repr__(self):
        return f"Reorder len={len(self)}"


# -- annotate ------------------------------------------------------------------------------------

_ANN_CODE = {"none": 0.0, "unroll": 1.0, "vec": 2.0}


class AnnotateEntity:
    KIND = "an"

    def __init__(self, anns):
        self.anns = list(anns)

    def apply(self, sch, op, axes, axis_lens=None, max_unroll=None, vec_size=None, cfg=None):
        """Unroll/vectorize the axes; an axis longer than ``max_unroll`` or whose length is not in
        ``vec_size`` is left alone (so one config never explodes the code size)."""
        del cfg
        for i, (axis, ann) in enumerate(zip(axes, self.anns)):
            length = axis_lens[i] if axis_lens else None
            if ann == "unroll" and (max_unroll is None or length is None or length <= max_unroll):
                sch[op].unroll(axis)
            elif ann == "vec" and (vec_size is None or length is None or length in vec_size):
                sch[op].vectorize(axis)
        return axes

    def features(self) -> list[float]:
        return [_ANN_CODE[a] for a in self.anns]

    def to_json(self):
        return list(self.anns)

    def __str__(self):
        return str(self.anns)

    __repr__ = __str__


class AnnotateSpace:
    def __init__(self, n: int, policy: str, max_unroll):
        del max_unroll  # applied by the template through AnnotateEntity.apply
        choices = {"try_unroll": (["none", "unroll"], ["none", "unroll"]),
                   "try_vec": (["none"], ["none", "vec"]),
                   "try_unroll_vec": (["none", "unroll"], ["none", "unroll", "vec"])}
        if policy not in choices:
            raise TuningError(f"define_annotate: unknown policy {policy!r}; use one of {sorted(choices)}")
        outer, last = choices[policy]
        per_axis = [outer] * (n - 1) + [last] if n else []
        self.entities = [AnnotateEntity(c) for c in itertools.product(*per_axis)]

    def __len__(self):
        return len(self.entities)

    def entity(self, i: int) -> AnnotateEntity:
        return self.entities[i]

    def __repr__(self):
        return f"Annotate len={len(self)}"


# -- other ---------------------------------------------------------------------------------------

class OtherOptionEntity:
    KIND = "ot"

    def __init__(self, val):
        self.val = val

    def features(self) -> list[float]:
        if isinstance(self.val, (bool, int, float)):
            return [float(self.val)]
        # Strings and other values: a stable number, so records of other runs line up.
        return [float(zlib.crc32(repr(self.val).encode()) % 1000)]

    def to_json(self):
        return self.val

    def __str__(self):
        return repr(self.val)

    __repr__ = __str__


class OtherOptionSpace:
    def __init__(self, candidate):
        self.entities = [OtherOptionEntity(v) for v in candidate]

    def __len__(self):
        return len(self.entities)

    def entity(self, i: int) -> OtherOptionEntity:
        return self.entities[i]

    def __repr__(self):
        return f"OtherOption({[e.val for e in self.entities]}) len={len(self)}"


_FROM_JSON = {"sp": SplitEntity, "re": ReorderEntity, "an": AnnotateEntity, "ot": OtherOptionEntity}


def entity_from_json(kind: str, value):
    if kind not in _FROM_JSON:
        raise ValueError(f"unknown knob kind {kind!r} (known: {sorted(_FROM_JSON)})")
    return _FROM_JSON[kind](value)
