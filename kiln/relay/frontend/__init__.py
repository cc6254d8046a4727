"""``relay.frontend``: importers from model formats. Only ONNX for now."""


def from_onnx(model, shape=None, dtype="float32", opset=None, freeze_params=True, convert_config=None):
    """Import an ONNX ModelProto (or a path to one); returns ``(mod, params)``.

    See kiln.relay.frontend.onnx.from_onnx.
    """
    from .onnx import from_onnx as _from_onnx  # onnx is imported only when a model is imported

    return _from_onnx(model, shape=shape, dtype=dtype, opset=opset, freeze_params=freeze_params)


__all__ = ["from_onnx"]
