"""Layout strings such as "NCHW", "NHWC" and "NCHW16c": the one parser relay and topi share.

Upper-case letters are primal axes; a number followed by a lower-case letter is a block of that
axis (``NCHW16c``: C split into C/16 chunks of 16, the block innermost). Only the ``errors``
module is imported, so relay's type relations can parse layouts without loading the compiler.
"""

from __future__ import annotations

import re

from .errors import ShapeError


def parse_layout(layout: str) -> list[tuple[str, int]]:
    """[(axis letter, block factor or 0 for a primal axis), ...]: "NCHW16c" -> N C H W (C, 16)."""
    items = re.findall(r"(\d*)([A-Za-z])", layout)
    if not layout or "".join(f + a for f, a in items) != layout:
        raise ShapeError(f"layout {layout!r} is not of the form 'NCHW' or 'NCHW16c'")
    out = []
    for factor, letter in items:
        if letter.isupper():
            if factor:
                raise ShapeError(f"layout {layout!r}: primal axis {letter} cannot have a factor")
            out.append((letter, 0))
        else:
            if not factor or int(factor) <= 0:
                raise ShapeError(f"layout {layout!r}: block axis {letter} needs a factor, e.g. 16{letter}")
            out.append((letter.upper(), int(factor)))
    primal = [a for a, f in out if not f]
    if len(set(primal)) != len(primal) or any(a not in primal for a, f in out if f):
        raise ShapeError(f"layout {layout!r}: each axis once, and a block only of an axis that is present")
    return out
