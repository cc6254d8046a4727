"""The untuned kernel of a task, built once, for ``check_correctness``.

It is the template under its fallback config (the code users get without tuning), exported the
same way the candidates are. Its outputs on the runner's deterministic inputs are what every
candidate's outputs must match.
"""

from __future__ import annotations

import shutil
import tempfile

import numpy as np

from kiln.errors import TuningError

from ..space import FallbackConfigEntity


class Reference:
    def __init__(self, task, builder=None):
        import kiln as tvm
        self._dir = tempfile.mkdtemp(prefix="kiln-autotvm-ref-")
        sch, args = task.instantiate(FallbackConfigEntity())
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
        self.filename = f"{self._dir}/reference.{suffix}"
        mod.export_library(self.filename, fcompile) if fcompile else mod.export_library(self.filename)
        self.outputs: list | None = None

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
        shutil.rmtree(self._dir, ignore_errors=True)
