"""Eager-mode torch.ao.quantization models (fbgemm, qnnpack, x86, onednn engines) traced to TorchScript and
imported by from_pytorch as qnn ops, against torch's own quantized kernels: every output within
one quantization step (torch requantizes in float32, kiln in fixed point)."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch)")

from frontend_run import run_built, run_reference  # noqa: E402

from kiln import relay  # noqa: E402
from kiln.relay.frontend.pytorch.importer import ImportError_  # noqa: E402

nn = torch.nn
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.filterwarnings("ignore::UserWarning")]


def _tq():
    import torch.ao.quantization as tq
    return tq


class Block(nn.Module):
    """QuantStub -> conv+relu -> depthwise conv -> 1x1 conv -> add_relu (FloatFunctional) ->
    hardswish * sigmoid -> cat -> adaptive avg pool -> flatten -> linear+relu -> linear -> DeQuantStub."""

    def __init__(self, c=8):
        super().__init__()
        fq = torch.ao.nn.quantized.FloatFunctional
        tq = _tq()
        self.q, self.dq = tq.QuantStub(), tq.DeQuantStub()
        self.c1, self.r1 = nn.Conv2d(3, c, 3, padding=1), nn.ReLU()
        self.c2 = nn.Conv2d(c, c, 3, padding=1, groups=c, stride=1)
        self.c3 = nn.Conv2d(c, c, 1)
        self.add, self.mul, self.cat = fq(), fq(), fq()
        self.hs, self.sig = nn.Hardswish(), nn.Sigmoid()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc, self.fr, self.fc2 = nn.Linear(2 * c, 12), nn.ReLU(), nn.Linear(12, 6)

    def forward(self, x):
        x = self.r1(self.c1(self.q(x)))
        y = self.c3(self.c2(x))
        x = self.add.add_relu(x, y)
        z = self.mul.mul(self.hs(x), self.sig(y))
        x = self.cat.cat([x, z], 1)
        x = self.pool(x).flatten(1)
        return self.dq(self.fc2(self.fr(self.fc(x)))), self.dq(z)


def _quantized(engine, seed=0, shape=(1, 3, 12, 12)):
    if engine not in torch.backends.quantized.supported_engines:
        pytest.skip(f"this torch build has no {engine} engine")
    tq = _tq()
    torch.backends.quantized.engine = engine
    torch.manual_seed(seed)
    m = Block().eval()
    m.qconfig = tq.get_default_qconfig(engine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tq.fuse_modules(m, [["c1", "r1"], ["fc", "fr"]], inplace=True)
        tq.prepare(m, inplace=True)
        for _ in range(8):
            m(torch.randn(shape))
        tq.convert(m, inplace=True)
        x = torch.randn(shape)
        return m, torch.jit.trace(m, x), x


@pytest.mark.parametrize("engine", ["fbgemm", "qnnpack", "x86", "onednn"])
def test_quantized_block_within_one_step_of_torch(engine):
    m, traced, x = _quantized(engine)
    mod, params = relay.frontend.from_pytorch(traced, [("x", tuple(x.shape))])
    text = mod["main"].astext()
    assert "qnn.conv2d" in text and "qnn.dense" in text and "qnn.mul" in text and "qnn.concatenate" in text
    want = [w.numpy() for w in traced(x)]
    steps = [m.fc2.scale, m.mul.scale]
    runs = (run_reference, run_built) if engine == "fbgemm" else (run_reference,)  # one build keeps it quick
    for got in (run(mod, params, {"x": x.numpy()}) for run in runs):
        for g, w, step in zip(got, want, steps):
            assert np.abs(g - w).max() <= step * 1.001


class One(nn.Module):
    """QuantStub(s) -> one quantized op -> DeQuantStub."""

    def __init__(self, kind):
        super().__init__()
        tq = _tq()
        self.kind = kind
        self.q1, self.q2, self.dq = tq.QuantStub(), tq.QuantStub(), tq.DeQuantStub()
        self.f = torch.ao.nn.quantized.FloatFunctional()
        self.op = {"conv": nn.Conv2d(8, 16, 3, padding=1), "dwconv": nn.Conv2d(8, 8, 3, stride=2, groups=8),
                   "linear": nn.Linear(12, 20), "hardswish": nn.Hardswish(), "sigmoid": nn.Sigmoid(),
                   "tanh": nn.Tanh(), "pool": nn.AdaptiveAvgPool2d(1), "maxpool": nn.MaxPool2d(2),
                   "relu6": nn.ReLU6(), "hardsigmoid": nn.Hardsigmoid(), "leaky_relu": nn.LeakyReLU(0.1),
                   "batchnorm": nn.BatchNorm2d(8)}.get(kind)
        if kind == "batchnorm":
            with torch.no_grad():
                self.op.running_mean.uniform_(-1, 1)
                self.op.running_var.uniform_(0.5, 2)
                self.op.weight.uniform_(0.5, 1.5)
                self.op.bias.uniform_(-0.5, 0.5)

    def forward(self, x, y):
        a, b = self.q1(x), self.q2(y)
        if self.kind in ("add", "mul", "add_relu"):
            return self.dq(getattr(self.f, self.kind)(a, b))
        if self.kind == "cat":
            return self.dq(self.f.cat([a, b], 1))
        return self.dq(self.op(a))

    def out_scale(self):
        if self.kind in ("add", "mul", "add_relu", "cat"):
            return self.f.scale
        if self.kind in ("pool", "maxpool", "relu6"):
            return self.q1.scale
        return getattr(self.op, "scale", 1 / 128 if self.kind == "tanh" else 1 / 256)


ONE_OPS = ["conv", "dwconv", "linear", "add", "add_relu", "mul", "cat", "hardswish", "sigmoid", "tanh", "pool",
           "maxpool", "relu6", "hardsigmoid", "leaky_relu", "batchnorm"]


@pytest.mark.parametrize("engine", ["fbgemm", "qnnpack"])
@pytest.mark.parametrize("kind", ONE_OPS)
def test_one_quantized_op_within_one_step_of_torch(engine, kind):
    if engine not in torch.backends.quantized.supported_engines:
        pytest.skip(f"this torch build has no {engine} engine")
    tq = _tq()
    torch.backends.quantized.engine = engine
    torch.manual_seed(1)
    shape = (2, 12) if kind == "linear" else (1, 8, 10, 10)
    m = One(kind).eval()
    m.qconfig = tq.get_default_qconfig(engine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tq.prepare(m, inplace=True)
        for _ in range(4):
            m(torch.randn(shape) * 2, torch.randn(shape))
        tq.convert(m, inplace=True)
    x, y = torch.randn(shape) * 2, torch.randn(shape)
    traced = torch.jit.trace(m, (x, y))
    mod, params = relay.frontend.from_pytorch(traced, [("x", shape), ("y", shape)])
    want = traced(x, y).numpy()
    got = run_reference(mod, params, {"x": x.numpy(), "y": y.numpy()})[0]
    assert np.abs(got - want).max() <= m.out_scale() * 1.001


def test_bad_input_is_one_error():
    class M(nn.Module):
        def forward(self, x):
            return torch.quantize_per_tensor(x, 0.1, 10, torch.qint32).dequantize()

    traced = torch.jit.trace(M(), torch.randn(1, 4))
    with pytest.raises(ImportError_, match=r"aten::quantize_per_tensor .*dtype code 14 is not quint8 or qint8"):
        relay.frontend.from_pytorch(traced, [("x", (1, 4))])

    class Mean(nn.Module):
        def forward(self, x):
            return torch.quantize_per_tensor(x, 0.1, 10, torch.quint8).mean(1).dequantize()

    traced = torch.jit.trace(Mean(), torch.randn(1, 4))
    with pytest.raises(ImportError_, match=r"aten::mean .*no quantized conversion in kiln; dequantize before it"):
        relay.frontend.from_pytorch(traced, [("x", (1, 4))])
