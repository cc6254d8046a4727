"""Compare a classifier's ranking with a reference's only where the precision determines it.

A reduced-precision build (float16, bfloat16, int8) moves every logit by up to some error bound
``e``. Two classes whose reference logits differ by more than ``e_i + e_j`` keep their order
whatever the rounding did; closer pairs may swap on one CPU and not on another (AVX512-FP16's
native half arithmetic rounds differently from F16C's float arithmetic between conversions).
So the determined pairs are asserted and the close ones are only reported:

    report = assert_ranking_kept(got[0], want[0], bound=16 * float16_step(want[0]))
    print(report)   # which pairs were asserted, which were too close to call

The pairs looked at are those of the reference's top ``top`` classes against every class below
them: the order inside the top and the membership of the top.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def float16_step(logits) -> float:
    """The spacing of float16 numbers at the logits' scale (their largest magnitude): one unit of
    float16 rounding of the largest logit."""
    return float(np.spacing(np.float16(np.abs(np.asarray(logits, "float32")).max())))


def bfloat16_step(logits) -> float:
    """The spacing of bfloat16 numbers (8 significant bits) at the logits' scale."""
    scale = float(np.abs(np.asarray(logits, "float32")).max())
    return 2.0 ** (np.floor(np.log2(scale)) - 7) if scale > 0 else 0.0


def allclose_bound(want, rtol: float, atol: float):
    """Per class, the error ``np.testing.assert_allclose(got, want, rtol, atol)`` accepts: the
    bound to use where a test's tolerance is what the precision allows for its network."""
    return atol + rtol * np.abs(np.asarray(want, "float64"))


@dataclass(frozen=True)
class RankingReport:
    """The pairs (higher class, lower class, reference gap) of one comparison."""
    top: list            # the reference's top classes, best first
    got_top: list        # the compared output's top classes, best first
    determined: list     # gap above both bounds: the order must hold
    swapped: list        # determined pairs whose order the output reversed
    undetermined: list   # gap within the bounds: reported only

    def __str__(self) -> str:
        close = ", ".join(f"{i}/{j} (gap {gap:.3g})" for i, j, gap in self.undetermined) or "none"
        lines = [f"top {len(self.top)}: reference {self.top}, got {self.got_top}; "
                 f"{len(self.determined)} determined pairs, {len(self.swapped)} swapped",
                 f"too close to call (not asserted): {close}"]
        if self.swapped:
            lines.append("swapped: " + ", ".join(f"{i} above {j} by {gap:.3g} in the reference"
                                                 for i, j, gap in self.swapped))
        return "\n".join(lines)


def compare_rankings(got, want, bound, top: int = 5) -> RankingReport:
    """Classify the pairs of ``want``'s top ``top`` classes against the classes below them.

    ``got`` and ``want`` are 1-D logits of one sample. ``bound`` is the largest error the
    precision allows on a logit: a number, or one per class. A pair (i above j) is determined
    when ``want[i] - want[j] > bound[i] + bound[j]``.
    """
    got, want = np.asarray(got, "float64").ravel(), np.asarray(want, "float64").ravel()
    if got.shape != want.shape:
        raise ValueError(f"compare_rankings: {got.size} logits against a reference of {want.size}")
    bound = np.broadcast_to(np.asarray(bound, "float64"), want.shape)
    order = np.argsort(-want, kind="stable")
    determined, swapped, undetermined = [], [], []
    for rank, i in enumerate(order[:top]):
        for j in order[rank + 1:]:
            gap = want[i] - want[j]
            pair = (int(i), int(j), float(gap))
            if gap > bound[i] + bound[j]:
                determined.append(pair)
                if not got[i] > got[j]:
                    swapped.append(pair)
            elif j in order[:top] or got[j] >= got[i]:  # close pairs that matter to the top
                undetermined.append(pair)
    return RankingReport([int(c) for c in order[:top]], [int(c) for c in np.argsort(-got, kind="stable")[:top]],
                         determined, swapped, undetermined)


def assert_ranking_kept(got, want, bound, top: int = 5) -> RankingReport:
    """compare_rankings, failing when a determined pair swapped or when no pair is determined
    (a bound that wide would check nothing). Returns the report for the caller to print."""
    report = compare_rankings(got, want, bound, top)
    assert report.determined, (f"no pair of the top {top} is determined: the bound exceeds every gap, "
                               f"so the comparison would check nothing\n{report}")
    assert not report.swapped, f"the output reversed pairs the precision determines\n{report}"
    return report
