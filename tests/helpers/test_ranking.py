"""tests/helpers/ranking.py: what it asserts, what it only reports, and that it can fail."""

import numpy as np
import pytest

from helpers.ranking import assert_ranking_kept, bfloat16_step, compare_rankings, float16_step

# ResNet-18 (random weights, tests/relay/onnx_models.py) as onnxruntime gives its top logits: the
# 5th and 6th classes (995, 978) lie 0.15 apart, about one float16 step (0.125 at this scale).
WANT = np.zeros(1000, "float32")
WANT[[681, 982, 76, 514, 995, 978, 122]] = [220.45, 200.80, 194.74, 189.50, 187.29, 187.13, 182.84]


def test_steps_are_the_spacing_at_the_largest_logit():
    assert float16_step(WANT) == 0.125                     # [128, 256): 2^7 * 2^-10
    assert float16_step([-3.0, 1.0]) == 2.0 ** -9          # [2, 4), by magnitude
    assert bfloat16_step(WANT) == 1.0                      # 8 significant bits: 2^7 * 2^-7
    assert bfloat16_step([0.75]) == 2.0 ** -8
    assert bfloat16_step(np.zeros(4)) == 0.0


def test_a_swap_within_the_bound_is_reported_not_asserted():
    got = WANT.copy()
    got[978], got[995] = got[995], got[978]                # the AVX512-FP16 result of issue 27
    got += np.random.default_rng(0).uniform(-0.05, 0.05, got.shape).astype("float32")
    report = assert_ranking_kept(got, WANT, bound=16 * float16_step(WANT))
    assert (995, 978) in [(i, j) for i, j, _ in report.undetermined]
    assert (681, 982) in [(i, j) for i, j, _ in report.determined]
    assert "995/978" in str(report) and "0 swapped" in str(report)


def test_a_swap_beyond_the_bound_fails():
    got = WANT.copy()
    got[76], got[514] = got[514], got[76]                  # 5.2 apart: 42 float16 steps
    with pytest.raises(AssertionError, match="(?s)reversed pairs.*76 above 514"):
        assert_ranking_kept(got, WANT, bound=16 * float16_step(WANT))


def test_a_class_entering_the_top_from_far_below_fails():
    got = WANT.copy()
    got[7] = 200.0                                         # 0 in the reference: far below the top 5
    with pytest.raises(AssertionError, match="(?s)995 above 7"):
        assert_ranking_kept(got, WANT, bound=1.0)


def test_a_bound_that_determines_nothing_fails():
    with pytest.raises(AssertionError, match="would check nothing"):
        assert_ranking_kept(WANT, WANT, bound=1000.0)


def test_per_class_bounds_and_exact_ties():
    want = np.array([3.0, 2.0, 1.0, 1.0])
    report = compare_rankings(want, want, bound=[0.1, 0.1, 0.6, 0.1], top=2)
    assert [(i, j) for i, j, _ in report.determined] == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    report = compare_rankings(want, want, bound=[0.1, 0.5, 0.6, 0.1], top=2)
    assert (1, 2) not in [(i, j) for i, j, _ in report.determined]   # 1.0 apart, bounds 0.5 + 0.6
    tied = compare_rankings([3.0, 1.0, 1.0], [3.0, 2.0, 1.0], bound=0.1, top=2)
    assert [(i, j) for i, j, _ in tied.swapped] == [(1, 2)]      # equal is not above
    with pytest.raises(ValueError, match="3 logits against a reference of 4"):
        compare_rankings(np.zeros(3), want, bound=0.1)
