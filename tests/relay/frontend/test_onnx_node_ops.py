"""ONNX node tests (the cases shipped inside the onnx package) of the ops issue 32 added, a few
per op, run through KilnBackend against onnx's expected outputs at each case's tolerances.
The whole suite is bench/onnx_coverage.py --all (docs/onnx_coverage.md); this keeps the new
converters from regressing in `make test` at a few seconds per case."""

from __future__ import annotations

import os

import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX node tests need the onnx package (pip install onnx)")

from kiln.relay.frontend.onnx import backend  # noqa: E402

CASES = """
test_selu test_celu test_thresholdedrelu test_mish test_swish test_softsign test_shrink_soft
test_tan test_asin test_acos test_atan test_sinh test_cosh test_asinh test_acosh test_atanh
test_isinf test_isinf_negative test_bitwise_and_i32_2d test_bitwise_not_3d test_bitwise_xor_ui8_bcast_4v3d
test_bitshift_left_uint16 test_bitshift_right_uint64
test_hardmax_axis_1 test_hardmax_one_hot test_l2normalization_axis_0 test_lppool_2d_pads test_lrn
test_mvn test_attention_3d_gqa_causal test_attention_4d_with_past_and_present_qk_matmul_bias
test_attention_4d_attn_mask_bool test_attention_3d_diff_heads_sizes_softcap
test_rms_normalization_2d_axis1 test_rotary_embedding_interleaved
test_rotary_embedding_with_rotary_dim test_center_crop_pad_crop_and_pad test_hannwindow_symmetric
test_blackmanwindow test_eyelike_populate_off_main_diagonal test_onehot_negative_indices
test_depthtospace_crd_mode_example test_spacetodepth_example test_bitcast_float32_to_int32
test_cumprod_1d_reverse_exclusive test_cumprod_2d_axis_1 test_top_k_same_values_2d test_top_k_smallest
test_compress_negative_axis test_gridsample_bicubic test_gridsample_reflection_padding
test_gridsample_volumetric_bilinear_align_corners_1 test_affine_grid_3d test_dft_rfft test_dft_irfft
test_dft_axis_opset19 test_tensorscatter_circular test_causal_conv_with_state_silu
test_reversesequence_batch test_upsample_nearest test_wrap_pad test_not_2d
test_cast_FLOAT_to_BFLOAT16 test_cast_BFLOAT16_to_FLOAT test_castlike_FLOAT_to_BFLOAT16_expanded
test_castlike_BFLOAT16_to_FLOAT test_range_bfloat16_type_positive_delta
""".split()


_ALL = {t.name: t for t, why in backend.all_node_tests()} if os.path.isdir(backend.node_test_dir()) else {}


@pytest.mark.parametrize("name", CASES)
def test_node_case(name):
    assert _ALL, f"no ONNX node test data under {backend.node_test_dir()}; install onnx<1.23"
    assert name in _ALL, f"{name} is not an onnx node test (renamed in onnx?)"
    backend.run_node_test(_ALL[name])


def test_whole_suite_selection_applies_the_exclusion_list():
    assert _ALL, f"no ONNX node test data under {backend.node_test_dir()}; install onnx<1.23"
    why = {t.name: reason for t, reason in backend.all_node_tests()}
    assert why["test_add"] is None and why["test_attention_3d"] is None and why["test_cast_FLOAT_to_FLOAT16"] is None
    assert why["test_cast_FLOAT_to_FLOAT8E4M3FN"] == "FLOAT8E4M3FN element type"
    assert why["test_cast_FLOAT_to_INT4"] == "INT4 element type"
    assert why["test_loop11"] == "control flow (Loop/If/Scan)"
    assert why["test_sequence_insert_at_back"] == "sequence/optional types"
    assert why["test_strnormalizer_nostopwords_nochangecase"] == "string op"
    assert why["test_adam"] == "training-only op" and why["test_sce_mean"] == "training-only op"
    assert why["test_image_decoder_decode_jpeg_rgb"] == "ImageDecoder"
    assert set(why.values()) <= {None, "control flow (Loop/If/Scan)", "sequence/optional types", "string op",
                                 "training-only op", "ImageDecoder"} | {r for r in why.values() if r and
                                                                         r.endswith(" element type")}


def test_training_mode_dropout_is_refused_naming_the_node():
    """A module exported in train() mode (torch's dynamo exporter keeps its Dropout nodes with
    training_mode = true) has random outputs: one error, not a silent identity."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from kiln import relay
    from kiln.errors import KilnError

    def model(ratio):
        inits = [numpy_helper.from_array(np.array(ratio, np.float32), "r"), numpy_helper.from_array(np.array(True), "t")]
        graph = helper.make_graph([helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop1")], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])

    with pytest.raises(KilnError, match=r"Dropout node 'drop1': runs in training mode .*ratio 0.1.*model\.eval\(\)"):
        relay.frontend.from_onnx(model(0.1))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(backend.KilnBackend.prepare(model(0.0), "CPU").run([x])[0], x)  # ratio 0: identity
