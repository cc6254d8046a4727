"""The untuned kernel of a task, built once, for ``check_correctness``.

It is the template under its fallback config (the code users get without tuning), exported the
same way the candidates are. Its outputs on the runner's deterministic inputs are what every
candidate's outputs must match.

A template whose knobs change its arguments' shapes (``cfg.define_layout("oc_bn")``: conv2d's
blocked output) is checked against the untuned kernel built in the candidate's layout
(``for_config``): inputs are filled by shape, so only kernels of the same layout see the same
data.
"""

from __future__ import annotations

import shutil
import tempfile

import numpy as np

from kiln.errors import TuningError

from ..space import FallbackConfigEntity


class Reference:
    def __init__(self, task, builder=None, config=None, directory=None, name="reference"):
        import kiln as tvm
        self.task, self.builder = task, builder
        self._owned = directory is None
        self._dir = directory or tempfile.mkdtemp(prefix="kiln-autotvm-ref-")
        self._variants: dict = {}
        sch, args = task.instantiate(config if config is not None else FallbackConfigEntity())
        self.arg_info = [(tuple(int(getattr(d, "value", d)) for d in t.shape), str(t.dtype),
                          type(t.op).__name__ != "PlaceholderOp") for t in args]
        try:
            mod = tvm.build(sch, args, target=task.target, target_host=task.target_host,
                            name="default_function")
        except Exception as e:  # noqa: BLE001
            raise TuningError(f"check_correctness: the untuned kernel of {task.name} does not "
                              f"build ({e}); turn check_correctness off for this task") from None
        suffix = getattr(builder, "suffix", "so")
        fcompile = getattr(builder, "fcompile", None)
        self.filename = f"{self._dir}/{name}.{suffix}"
        mod.export_library(self.filename, fcompile) if fcompile else mod.export_library(self.filename)
        self.outputs: list | None = None

    def for_config(self, config) -> "Reference":
        """The reference for candidate ``config``: this one, or for a template with layout knobs
        the untuned kernel in ``config``'s layout (built once per layout)."""
        space = self.task.config_space
        if not getattr(space, "layout_knobs", ()) or getattr(config, "index", -1) < 0:
            return self
        variant = space.layout_variant(config)
        if variant is None:
            raise TuningError(f"check_correctness: {self.task.name} declares layout knobs but no "
                              "default config to build its untuned kernel in other layouts")
        key = tuple(str(variant[k]) for k in space.layout_knobs)
        if key not in self._variants:
            self._variants[key] = Reference(self.task, self.builder, variant, self._dir,
                                            f"reference_{len(self._variants)}")
        ref = self._variants[key]
        return self if ref.arg_info == self.arg_info else ref

    @staticmethod
    def compare(expected, outputs, rtol: float = 1e-3) -> str:
        """'' when ``outputs`` match ``expected``; else what differs."""
        for i, (want, got) in enumerate(zip(expected, outputs)):
            scale = float(np.max(np.abs(want))) if want.size else 0.0
            # Reassociated float sums differ by rounding; allow it relative to the magnitude.
            if not np.allclose(got, want, rtol=rtol, atol=rtol * max(scale, 1e-6), equal_nan=True):
                bad = np.argmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))
                return (f"output {i} differs from the untuned kernel's: at flat index {bad} got "
                        f"{got.ravel()[bad]!r}, expected {want.ravel()[bad]!r}")
        return ""

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self._dir, ignore_errors=True)
