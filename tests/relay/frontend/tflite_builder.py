"""Write .tflite flatbuffers with the ``tflite`` package's generated builders (no TensorFlow
converter installs here), and a small MobileNet-like network in float and int8.

The int8 model is quantized the way TFLite's post-training quantizer does it: activations
asymmetric per tensor from ranges observed on the float model (run by the ai-edge-litert
interpreter), conv filters symmetric per channel, fully connected weights symmetric per
tensor, biases int32 with scale input_scale * weight_scale, softmax output 1/256 and -128.
"""

import flatbuffers
import numpy as np
import tflite

_TYPES = {"float32": 0, "int32": 2, "uint8": 3, "int64": 4, "int16": 7, "int8": 9}


class FlatModel:
    """Tensors, buffers and operators of one subgraph; ``finish()`` returns the file's bytes."""

    def __init__(self):
        self.tensors, self.buffers, self.ops, self.codes = [], [b""], [], []

    def tensor(self, name, shape, dtype="float32", data=None, quant=None):
        """quant: (scales, zero_points, quantized_dimension)."""
        buf = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(np.asarray(data, dtype=dtype)).tobytes())
            buf = len(self.buffers) - 1
        self.tensors.append((name, tuple(int(d) for d in shape), dtype, buf, quant))
        return len(self.tensors) - 1

    def op(self, code_name, inputs, outputs, options=None, **fields):
        code = getattr(tflite.BuiltinOperator, code_name)
        if code not in self.codes:
            self.codes.append(code)
        self.ops.append((self.codes.index(code), list(inputs), list(outputs), options, fields))

    def finish(self, inputs, outputs) -> bytes:
        b = flatbuffers.Builder(1024)
        buffers = [self._buffer(b, data) for data in self.buffers]
        tensors = [self._tensor(b, *t) for t in self.tensors]
        ops = [self._op(b, *o) for o in self.ops]
        name = b.CreateString("main")
        sub_t, sub_o = _vector(b, tensors), _vector(b, ops)
        sub_in, sub_out = b.CreateNumpyVector(np.array(inputs, "int32")), b.CreateNumpyVector(np.array(outputs, "int32"))
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, sub_t)
        tflite.SubGraphAddInputs(b, sub_in)
        tflite.SubGraphAddOutputs(b, sub_out)
        tflite.SubGraphAddOperators(b, sub_o)
        tflite.SubGraphAddName(b, name)
        subgraph = tflite.SubGraphEnd(b)
        codes = []
        for code in self.codes:
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tflite.OperatorCodeAddBuiltinCode(b, code)
            tflite.OperatorCodeAddVersion(b, 1)
            codes.append(tflite.OperatorCodeEnd(b))
        codes_v, subs_v, bufs_v = _vector(b, codes), _vector(b, [subgraph]), _vector(b, buffers)
        desc = b.CreateString("kiln test model")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, codes_v)
        tflite.ModelAddSubgraphs(b, subs_v)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, bufs_v)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _buffer(b, data):
        vec = None
        if data:
            b.StartVector(1, len(data), 16)  # 16-byte aligned, as TFLite's converter writes them
            b.head = b.head - len(data)
            b.Bytes[b.head:b.head + len(data)] = data
            vec = b.EndVector()
        tflite.BufferStart(b)
        if vec is not None:
            tflite.BufferAddData(b, vec)
        return tflite.BufferEnd(b)

    @staticmethod
    def _tensor(b, name, shape, dtype, buf, quant):
        name_off = b.CreateString(name)
        shape_off = b.CreateNumpyVector(np.array(shape, "int32"))
        q_off = None
        if quant is not None:
            scales, zps, dim = quant
            s_off = b.CreateNumpyVector(np.asarray(scales, "float32").reshape(-1))
            z_off = b.CreateNumpyVector(np.asarray(zps, "int64").reshape(-1))
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, s_off)
            tflite.QuantizationParametersAddZeroPoint(b, z_off)
            tflite.QuantizationParametersAddQuantizedDimension(b, dim)
            q_off = tflite.QuantizationParametersEnd(b)
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape_off)
        tflite.TensorAddType(b, _TYPES[dtype])
        tflite.TensorAddBuffer(b, buf)
        tflite.TensorAddName(b, name_off)
        if q_off is not None:
            tflite.TensorAddQuantization(b, q_off)
        return tflite.TensorEnd(b)

    @staticmethod
    def _op(b, code_index, inputs, outputs, options, fields):
        opt_off = None
        if options is not None:
            getattr(tflite, f"{options}Start")(b)
            for field, value in fields.items():
                getattr(tflite, f"{options}Add{field}")(b, value)
            opt_off = getattr(tflite, f"{options}End")(b)
        in_off = b.CreateNumpyVector(np.array(inputs, "int32"))
        out_off = b.CreateNumpyVector(np.array(outputs, "int32"))
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, code_index)
        tflite.OperatorAddInputs(b, in_off)
        tflite.OperatorAddOutputs(b, out_off)
        if opt_off is not None:
            tflite.OperatorAddBuiltinOptionsType(b, getattr(tflite.BuiltinOptions, options))
            tflite.OperatorAddBuiltinOptions(b, opt_off)
        return tflite.OperatorEnd(b)


def _vector(b, offsets):
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


# -- a network description run twice: float, then int8 with ranges from the float run -----------

SAME, VALID = tflite.Padding.SAME, tflite.Padding.VALID
NONE, RELU, RELU6 = 0, 1, 3


def _asym(lo, hi):
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255 or 1.0
    return scale, int(np.clip(round(-128 - lo / scale), -128, 127))


def _out_size(size, k, s, padding):
    return -(-size // s) if padding == SAME else (size - k) // s + 1


class Net:
    """Builds the same network as float32 (``ranges=None``) or int8 (``ranges``: name -> (min, max))."""

    def __init__(self, ranges=None):
        self.m = FlatModel()
        self.q = ranges is not None
        self.ranges = ranges or {}
        self.shapes, self.qp = {}, {}

    def _act(self, name, shape, same_as=None, fixed=None):
        if not self.q:
            t = self.m.tensor(name, shape)
        else:
            qp = fixed or (self.qp[same_as] if same_as is not None else _asym(*self.ranges[name]))
            t = self.m.tensor(name, shape, "int8", quant=([qp[0]], [qp[1]], 0))
            self.qp[t] = qp
        self.shapes[t] = tuple(shape)
        return t

    def input(self, name, shape):
        x = self.m.tensor(name, shape)
        self.shapes[x] = tuple(shape)
        self.inputs = [x]
        if not self.q:
            return x
        out = self._act(name + "_int8", shape)
        self.m.op("QUANTIZE", [x], [out])
        return out

    def _filter(self, name, w, axis, bias):
        if not self.q:
            wt = self.m.tensor(name + "_w", w.shape, data=w)
            bt = self.m.tensor(name + "_b", bias.shape, data=bias) if bias is not None else -1
            return wt, bt
        red = tuple(a for a in range(w.ndim) if a != axis) if axis is not None else None
        scale = np.maximum(np.abs(w).max(axis=red), 1e-8) / 127
        shape = [1] * w.ndim
        if axis is not None:
            shape[axis] = -1
        q = np.clip(np.round(w / np.reshape(scale, shape)), -127, 127).astype("int8")
        scales = np.atleast_1d(scale)
        wt = self.m.tensor(name + "_w", w.shape, "int8", q, (scales, np.zeros(len(scales), "int64"), axis or 0))
        return wt, scales

    def _bias(self, name, x, bias, wscales):
        if not self.q:
            return wscales
        bscale = self.qp[x][0] * wscales
        bscale = np.broadcast_to(bscale, bias.shape)
        q = np.round(bias / bscale).astype("int32")
        return self.m.tensor(name + "_b", bias.shape, "int32", q, (bscale, np.zeros(len(bscale), "int64"), 0))

    def conv(self, name, x, w, bias, stride=1, padding=SAME, act=NONE):
        """w: (O, kh, kw, I)."""
        n, h, wd, _ = self.shapes[x]
        wt, extra = self._filter(name, w, 0, bias)
        bt = self._bias(name, x, bias, extra) if self.q else extra
        shape = (n, _out_size(h, w.shape[1], stride, padding), _out_size(wd, w.shape[2], stride, padding), w.shape[0])
        out = self._act(name, shape)
        self.m.op("CONV_2D", [x, wt, bt], [out], "Conv2DOptions", Padding=padding, StrideW=stride, StrideH=stride,
                  FusedActivationFunction=act, DilationWFactor=1, DilationHFactor=1)
        return out

    def dwconv(self, name, x, w, bias, stride=1, padding=SAME, act=NONE, multiplier=1, like=None):
        """w: (1, kh, kw, C * multiplier); ``like``: a tensor whose int8 parameters the output takes."""
        n, h, wd, _ = self.shapes[x]
        wt, extra = self._filter(name, w, 3, bias)
        bt = self._bias(name, x, bias, extra) if self.q else extra
        shape = (n, _out_size(h, w.shape[1], stride, padding), _out_size(wd, w.shape[2], stride, padding), w.shape[3])
        out = self._act(name, shape, same_as=like)
        self.m.op("DEPTHWISE_CONV_2D", [x, wt, bt], [out], "DepthwiseConv2DOptions", Padding=padding,
                  StrideW=stride, StrideH=stride, DepthMultiplier=multiplier, FusedActivationFunction=act,
                  DilationWFactor=1, DilationHFactor=1)
        return out

    def add(self, name, a, b, act=NONE):
        out = self._act(name, self.shapes[a])
        self.m.op("ADD", [a, b], [out], "AddOptions", FusedActivationFunction=act)
        return out

    def pool(self, name, kind, x, k, stride, padding=VALID):
        n, h, w, c = self.shapes[x]
        out = self._act(name, (n, _out_size(h, k, stride, padding), _out_size(w, k, stride, padding), c), same_as=x)
        self.m.op(kind, [x], [out], "Pool2DOptions", Padding=padding, StrideW=stride, StrideH=stride,
                  FilterWidth=k, FilterHeight=k, FusedActivationFunction=NONE)
        return out

    def unary(self, name, kind, x):
        out = self._act(name, self.shapes[x])
        self.m.op(kind, [x], [out])
        return out

    def concat(self, name, xs, axis=3):
        shape = list(self.shapes[xs[0]])
        shape[axis] = sum(self.shapes[x][axis] for x in xs)
        out = self._act(name, shape, same_as=xs[0])  # int8 CONCATENATION wants one scale for all
        self.m.op("CONCATENATION", xs, [out], "ConcatenationOptions", Axis=axis, FusedActivationFunction=NONE)
        return out

    def pad(self, name, x, pads):
        p = self.m.tensor(name + "_pads", (len(pads), 2), "int32", np.array(pads, "int32"))
        shape = [d + lo + hi for d, (lo, hi) in zip(self.shapes[x], pads)]
        out = self._act(name, shape, same_as=x)
        self.m.op("PAD", [x, p], [out])
        return out

    def mean(self, name, x, axes, keep=False):
        a = self.m.tensor(name + "_axes", (len(axes),), "int32", np.array(axes, "int32"))
        shape = [1 if i in axes else d for i, d in enumerate(self.shapes[x]) if keep or i not in axes]
        out = self._act(name, shape)
        self.m.op("MEAN", [x, a], [out], "ReducerOptions", KeepDims=keep)
        return out

    def reshape(self, name, x, shape):
        s = self.m.tensor(name + "_shape", (len(shape),), "int32", np.array(shape, "int32"))
        out = self._act(name, shape, same_as=x)
        self.m.op("RESHAPE", [x, s], [out])
        return out

    def fc(self, name, x, w, bias, act=NONE):
        wt, extra = self._filter(name, w, None, bias)
        bt = self._bias(name, x, bias, extra) if self.q else extra
        out = self._act(name, (self.shapes[x][0], w.shape[0]))
        self.m.op("FULLY_CONNECTED", [x, wt, bt], [out], "FullyConnectedOptions", FusedActivationFunction=act)
        return out

    def softmax(self, name, x):
        out = self._act(name, self.shapes[x], fixed=(1 / 256, -128))
        self.m.op("SOFTMAX", [x], [out], "SoftmaxOptions", Beta=1.0)
        return out

    def dequantize(self, name, x):
        if not self.q:
            return x
        out = self.m.tensor(name, self.shapes[x])
        self.m.op("DEQUANTIZE", [x], [out])
        return out

    def finish(self, outputs):
        return self.m.finish(self.inputs, outputs)


def mobilenet_like(ranges=None, seed=0, image=16, classes=10):
    """PAD + stem conv (RELU6) -> inverted residual (expand 1x1, depthwise, project, ADD) ->
    strided depthwise + max pool branch joined by CONCATENATION -> RELU6 op -> average pool ->
    MEAN + RESHAPE -> FULLY_CONNECTED -> SOFTMAX; outputs the logits and the probabilities."""
    rng = np.random.default_rng(seed)

    def w(*shape, fan):
        return (rng.standard_normal(shape) / np.sqrt(fan)).astype("float32")

    def b(n):
        return (rng.standard_normal(n) * 0.1).astype("float32")

    net = Net(ranges)
    x = net.input("input", (1, image, image, 3))
    x = net.pad("pad", x, [(0, 0), (1, 1), (1, 1), (0, 0)])
    x = net.conv("stem", x, w(8, 3, 3, 3, fan=27), b(8), stride=2, padding=VALID, act=RELU6)
    e = net.conv("expand", x, w(16, 1, 1, 8, fan=8), b(16), act=RELU6)
    e = net.dwconv("dw", e, w(1, 3, 3, 16, fan=9), b(16), act=RELU6)
    p = net.conv("project", e, w(8, 1, 1, 16, fan=16), b(8))
    x = net.add("res", x, p)
    m = net.pool("maxpool", "MAX_POOL_2D", x, 2, 2)
    d = net.dwconv("dw2", x, w(1, 3, 3, 16, fan=9), b(16), stride=2, act=RELU, multiplier=2, like=m)
    x = net.concat("cat", [m, d])                                    # (1, 4, 4, 24)
    x = net.unary("relu6", "RELU6", x)
    a = net.pool("avgpool", "AVERAGE_POOL_2D", x, 3, 1, SAME)
    g = net.mean("gap", a, [1, 2], keep=True)
    g = net.reshape("flat", g, (1, 24))
    logits = net.fc("fc", g, w(classes, 24, fan=24), b(classes))
    prob = net.softmax("prob", logits)
    return net.finish([logits, net.dequantize("prob_float", prob)])


def calibrate(model: bytes, inputs, others=None) -> dict:
    """name -> (min, max) of every float tensor over ``inputs`` (fed to the first input; ``others``:
    {input name: values} for the rest), run by the TFLite interpreter."""
    from ai_edge_litert.interpreter import Interpreter
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # preserve_all_tensors warns that it is for debugging
        it = Interpreter(model_content=model, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    ranges = {}
    details = it.get_input_details()
    for i, x in enumerate(inputs):
        it.set_tensor(details[0]["index"], x)
        for d in details[1:]:
            it.set_tensor(d["index"], others[d["name"]][i])
        it.invoke()
        for d in it.get_tensor_details():
            if d["dtype"] != np.float32:
                continue
            try:
                v = it.get_tensor(d["index"])
            except ValueError:
                continue
            lo, hi = ranges.get(d["name"], (np.inf, -np.inf))
            ranges[d["name"]] = (min(lo, float(v.min())), max(hi, float(v.max())))
    if "input" in ranges:
        ranges["input_int8"] = ranges["input"]
    return ranges


def run_tflite(model: bytes, inputs: dict) -> list:
    """The model's outputs from the ai-edge-litert interpreter: TFLite's builtin kernels (the
    XNNPACK delegate is left out: it refuses int8 CONCATENATION inputs with different scales)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    it = Interpreter(model_content=model, num_threads=1,  # one thread: its MEAN splits channels by thread
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], inputs[d["name"]])
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


# -- one quantized operator per model, random parameters (test_tflite_quantized.py) ---------------

QRANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


def single_op(kind: str, dtype: str = "int8", seed: int = 0, channels: int = 16):
    """A model of one quantized ``kind`` op on a (1, 8, 8, channels) ``dtype`` input ("x"; binary ops
    also read "x2") with random scales and zero points (0 for int16, as TFLite's int16x8),
    per-channel int8 filters and an int32 (int64 for int16x8) bias. Returns (bytes, input names)."""
    rng = np.random.default_rng(seed)
    lo, hi = QRANGES[dtype]
    bias_dtype = "int64" if dtype == "int16" else "int32"
    m = FlatModel()

    def zp():
        return 0 if dtype == "int16" else int(rng.integers(lo + 20, hi - 20))

    def act(name, shape, fixed=None):
        s, z = fixed or (float(rng.uniform(0.01, 0.1)), zp())
        return m.tensor(name, shape, dtype, quant=([s], [z], 0))

    x = act("x", (1, 8, 8, channels))
    xs = m.tensors[x][4][0][0]
    ins = [x]
    if kind in ("conv1", "conv3", "dw"):
        k, oc, axis = (1, 12, 0) if kind == "conv1" else (3, 12, 0) if kind == "conv3" else (3, 16, 3)
        shape = (oc, k, k, 16) if kind != "dw" else (1, k, k, 16)
        if dtype == "uint8":  # the older scheme: uint8 weights, one asymmetric scale per tensor
            ws = np.full(oc, rng.uniform(0.001, 0.01), "float32")
            w = m.tensor("w", shape, "uint8", rng.integers(0, 256, shape), ([ws[0]], [int(rng.integers(110, 146))], 0))
            b = m.tensor("b", (oc,), "int32", rng.integers(-2000, 2000, oc), ([np.float32(xs) * ws[0]], [0], 0))
        else:
            ws = rng.uniform(0.001, 0.01, oc).astype("float32")
            w = m.tensor("w", shape, "int8", rng.integers(-127, 128, shape), (ws, np.zeros(oc, "int64"), axis))
            b = m.tensor("b", (oc,), bias_dtype, rng.integers(-2000, 2000, oc),
                         (np.float32(xs) * ws, np.zeros(oc, "int64"), 0))
        y = act("y", (1, 8, 8, oc))
        if kind == "dw":
            m.op("DEPTHWISE_CONV_2D", [x, w, b], [y], "DepthwiseConv2DOptions", Padding=SAME, StrideW=1, StrideH=1,
                 DepthMultiplier=1, FusedActivationFunction=RELU6, DilationWFactor=1, DilationHFactor=1)
        else:
            m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", Padding=SAME, StrideW=1, StrideH=1,
                 FusedActivationFunction=RELU if kind == "conv3" else NONE, DilationWFactor=1, DilationHFactor=1)
    elif kind == "fc":
        wz = int(rng.integers(110, 146)) if dtype == "uint8" else 0
        wlo = 0 if dtype == "uint8" else -127
        w = m.tensor("w", (20, 16), "uint8" if dtype == "uint8" else "int8", rng.integers(wlo, wlo + 255, (20, 16)),
                     ([0.005], [wz], 0))
        b = m.tensor("b", (20,), bias_dtype, rng.integers(-2000, 2000, 20), ([np.float32(xs) * np.float32(0.005)], [0], 0))
        y = act("y", (1, 8, 8, 20))
        m.op("FULLY_CONNECTED", [x, w, b], [y], "FullyConnectedOptions", FusedActivationFunction=NONE, KeepNumDims=True)
    elif kind in ("add", "sub", "mul"):
        ins.append(act("x2", (1, 8, 8, 16)))
        y = act("y", (1, 8, 8, 16))
        m.op(kind.upper(), ins, [y], kind.capitalize() + "Options", FusedActivationFunction=RELU if kind == "add" else NONE)
    elif kind == "mean":
        a = m.tensor("axes", (2,), "int32", np.array([1, 2]))
        y = act("y", (1, 1, 1, channels))
        m.op("MEAN", [x, a], [y], "ReducerOptions", KeepDims=True)
    elif kind in ("avgpool", "maxpool"):
        y = m.tensor("y", (1, 8, 8, 16), dtype, quant=([xs], [m.tensors[x][4][1][0]], 0))  # pools keep the input's
        m.op("AVERAGE_POOL_2D" if kind == "avgpool" else "MAX_POOL_2D", [x], [y], "Pool2DOptions", Padding=SAME,
             StrideW=1, StrideH=1, FilterWidth=3, FilterHeight=3, FusedActivationFunction=NONE)
    elif kind == "softmax":
        y = act("y", (1, 8, 8, 16), (1 / 256, -128 if dtype == "int8" else 0))
        m.op("SOFTMAX", [x], [y], "SoftmaxOptions", Beta=1.0)
    elif kind in ("LOGISTIC", "TANH"):
        s, z = {"LOGISTIC": (1 / 256, -128), "TANH": (1 / 128, 0)}[kind]
        y = act("y", (1, 8, 8, 16), (s, z + 128 if dtype == "uint8" else z))
        m.op(kind, [x], [y])
    else:  # HARD_SWISH, RELU, RELU6, ...
        y = act("y", (1, 8, 8, 16))
        m.op(kind, [x], [y])
    return m.finish(ins, [y]), ["x", "x2"][:len(ins)]


def random_feed(names, dtype, seed, channels=16):
    rng = np.random.default_rng(seed)
    lo, hi = QRANGES[dtype]
    return {n: rng.integers(lo, hi + 1, (1, 8, 8, channels)).astype(dtype) for n in names}


# MobileNetV2's inverted residual settings: (expansion, channels, repeats, first stride)
V2_BLOCKS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def mobilenet_v2(ranges=None, image=96, width=0.5, classes=100, seed=0, blocks=None):
    """A MobileNetV2 (Sandler et al. 2018) with random weights: stem conv 3x3/2 (RELU6), inverted
    residual blocks (1x1 expand RELU6, 3x3 depthwise RELU6, 1x1 project, ADD where the shape
    holds), 1x1 conv to 1280*width (RELU6), MEAN over H, W, FULLY_CONNECTED, SOFTMAX. Float32
    with ``ranges=None``, int8 with ranges from ``calibrate``. ``blocks`` overrides V2_BLOCKS."""
    rng = np.random.default_rng(seed)

    def ch(c):
        return max(8, int(c * width + 4) // 8 * 8)

    def w(*shape, fan):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan)).astype("float32")

    def b(n):
        return (rng.standard_normal(n) * 0.05).astype("float32")

    net = Net(ranges)
    x = net.input("input", (1, image, image, 3))
    c = ch(32)
    x = net.conv("stem", x, w(c, 3, 3, 3, fan=27), b(c), stride=2, act=RELU6)
    for i, (t, cout, n, s) in enumerate(blocks or V2_BLOCKS):
        cout = ch(cout)
        for j in range(n):
            stride = s if j == 0 else 1
            name = f"b{i}_{j}"
            h = x
            if t != 1:
                h = net.conv(name + "_expand", h, w(c * t, 1, 1, c, fan=c), b(c * t), act=RELU6)
            h = net.dwconv(name + "_dw", h, w(1, 3, 3, c * t, fan=9), b(c * t), stride=stride, act=RELU6)
            h = net.conv(name + "_project", h, w(cout, 1, 1, c * t, fan=c * t) * 0.5, b(cout))
            x = net.add(name + "_add", x, h) if stride == 1 and cout == c else h
            c = cout
    last = ch(1280) if width > 1.0 else 1280 // (2 if width < 1.0 else 1)
    x = net.conv("head", x, w(last, 1, 1, c, fan=c), b(last), act=RELU6)
    g = net.mean("gap", x, [1, 2], keep=True)
    g = net.reshape("flat", g, (1, last))
    logits = net.fc("logits", g, w(classes, last, fan=last), b(classes))
    return net.finish([logits, net.softmax("prob", logits)])
