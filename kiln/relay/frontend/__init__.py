"""``relay.frontend``: importers from model formats (ONNX, Keras .h5, TFLite, TorchScript).

Each framework package is imported only when a model is imported."""


def from_onnx(model, shape=None, dtype="float32", opset=None, freeze_params=True, convert_config=None):
    """Import an ONNX ModelProto (or a path to one); returns ``(mod, params)``.

    See kiln.relay.frontend.onnx.from_onnx.
    """
    from .onnx import from_onnx as _from_onnx  # onnx is imported only when a model is imported

    return _from_onnx(model, shape=shape, dtype=dtype, opset=opset, freeze_params=freeze_params)


def from_pytorch(script_module, input_infos, custom_convert_map=None, default_dtype="float32"):
    """Import a traced TorchScript module; returns ``(mod, params)``.

    See kiln.relay.frontend.pytorch.from_pytorch.
    """
    from .pytorch import from_pytorch as _from_pytorch

    return _from_pytorch(script_module, input_infos, custom_convert_map, default_dtype)


def from_keras(model, shape=None, layout="NCHW"):
    """Import a Keras ``.h5`` model (path or h5py.File); returns ``(mod, params)``.

    See kiln.relay.frontend.keras.from_keras.
    """
    from .keras import from_keras as _from_keras

    return _from_keras(model, shape, layout)


def from_tflite(model, shape_dict=None, dtype_dict=None, exact_rounding=True):
    """Import a TFLite model (tflite.Model, bytes or path); returns ``(mod, params)``.

    See kiln.relay.frontend.tflite.from_tflite.
    """
    from .tflite import from_tflite as _from_tflite

    return _from_tflite(model, shape_dict, dtype_dict, exact_rounding=exact_rounding)


__all__ = ["from_onnx", "from_pytorch", "from_keras", "from_tflite"]
