"""from_pytorch on traced modules vs torch's own output: a ResNet-18 written in plain torch
(reference executor and relay.build, 1e-4) and small modules for the common ops."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend tests need torch (pip install 'kiln[frontends]')")
nn = torch.nn
F = torch.nn.functional

from frontend_run import run_built, run_reference  # noqa: E402

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-4)
# torch 2.9+ marks TorchScript deprecated; tracing is still the API 002 and TVM users call.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    def __init__(self, classes=1000, width=64):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], width
        for i, cout in enumerate([width, width * 2, width * 4, width * 8]):
            layers += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.avgpool(self.layers(x))
        return self.fc(torch.flatten(x, 1))


def _randomize_bn(model, seed=0):
    """Non-trivial running statistics, so batch norm is really tested."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g) * 0.2 - 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(m.num_features, generator=g) * 0.2 - 0.1)
    return model


def _import(model, x, name="input"):
    model = model.eval()
    with torch.no_grad():
        traced = torch.jit.trace(model, x)
        want = model(x)
    mod, params = relay.frontend.from_pytorch(traced, [(name, tuple(x.shape))])
    wants = [w.numpy() for w in want] if isinstance(want, tuple) else [want.numpy()]
    return mod, params, {name: x.numpy()}, wants


def _check(got, wants, tol=TOL):
    assert len(got) == len(wants)
    for g, w in zip(got, wants):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, **tol)


def test_resnet18_matches_torch():
    torch.manual_seed(0)
    mod, params, inputs, want = _import(_randomize_bn(ResNet18()), torch.rand(1, 3, 224, 224))
    assert mod["main"].checked_type.ret_type == relay.TensorType((1, 1000), "float32")
    _check(run_reference(mod, params, inputs), want)


def test_resnet18_built_for_llvm_matches_torch():
    torch.manual_seed(1)
    mod, params, inputs, want = _import(_randomize_bn(ResNet18(classes=10, width=16)), torch.rand(2, 3, 64, 64))
    _check(run_built(mod, params, inputs), want)


@pytest.mark.slow
def test_full_resnet18_built_for_llvm_matches_torch():
    torch.manual_seed(5)
    mod, params, inputs, want = _import(_randomize_bn(ResNet18()), torch.rand(1, 3, 224, 224))
    _check(run_built(mod, params, inputs), want)


class CommonOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.w = nn.Parameter(torch.rand(8, 6))

    def forward(self, x):                        # x: (2, 4, 8)
        h = self.norm(self.proj(x))
        a = torch.matmul(h, h.transpose(1, 2))   # batched matmul (2, 4, 4)
        a = torch.softmax(a / 3.0, dim=-1)
        h = torch.matmul(a, h)                   # (2, 4, 8)
        g = F.gelu(h) + torch.sigmoid(h) * torch.tanh(h)
        c = torch.cat([g, h], dim=2)             # (2, 4, 16)
        c = c.view(c.size(0), 4, 4, 4).permute(0, 2, 1, 3).reshape(2, -1, 8)
        m = c.mean(dim=1, keepdim=True) - c.mean(1, True)[:, :, :1]
        return torch.matmul(c + m, self.w), torch.sigmoid(c).mean(-1)


def test_common_ops_match_torch():
    torch.manual_seed(2)
    mod, params, inputs, want = _import(CommonOps(), torch.rand(2, 4, 8))
    _check(run_reference(mod, params, inputs), want)
    _check(run_built(mod, params, inputs), want)


class Activations(nn.Module):
    def forward(self, x):
        y = F.relu6(x * 4) + F.hardtanh(x, -0.5, 0.5) + F.leaky_relu(x, 0.1) + F.silu(x) + F.hardswish(x)
        y = y + F.gelu(x, approximate="tanh") - torch.clamp(x, min=0.1) + F.avg_pool2d(x, 3, 1, 1)
        y = F.max_pool2d(y, 2, ceil_mode=True)
        return y.view(y.size(0), -1) / y.size(1) - 2 + torch.div(y.flatten(1), 3, rounding_mode="floor")


def test_activations_and_pools_match_torch():
    torch.manual_seed(3)
    mod, params, inputs, want = _import(Activations(), torch.randn(1, 2, 7, 7))
    _check(run_reference(mod, params, inputs), want)


def test_saved_archive_loads_by_path(tmp_path):
    torch.manual_seed(4)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)).eval()
    x = torch.rand(1, 3, 8, 8)
    path = tmp_path / "m.pt"
    torch.jit.trace(model, x).save(str(path))
    mod, params = relay.frontend.from_pytorch(str(path), {"input": [1, 3, 8, 8]})
    _check(run_reference(mod, params, {"input": x.numpy()}), [model(x).detach().numpy()])


def test_errors_name_the_problem(tmp_path):
    traced = torch.jit.trace(nn.Sequential(nn.Conv2d(3, 4, 3)).eval(), torch.rand(1, 3, 8, 8))
    with pytest.raises(tvm.KilnError, match=r"takes 1 input\(s\) but input_infos names 2"):
        relay.frontend.from_pytorch(traced, [("a", (1, 3, 8, 8)), ("b", (1, 3, 8, 8))])
    with pytest.raises(tvm.KilnError, match="carry no input shapes"):
        relay.frontend.from_pytorch(traced, [])
    with pytest.raises(tvm.KilnError, match="takes a TorchScript module, got Linear"):
        relay.frontend.from_pytorch(nn.Linear(2, 2), [("x", (1, 2))])
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a zip")
    with pytest.raises(tvm.KilnError, match="is not a TorchScript archive"):
        relay.frontend.from_pytorch(str(bad), [("x", (1, 2))])

    class Odd(nn.Module):
        def forward(self, x):
            return torch.logcumsumexp(x, 0)
    with pytest.raises(tvm.KilnError, match=r"unsupported op\(s\): aten::logcumsumexp \(x1\).*docs/frontends.md"):
        relay.frontend.from_pytorch(torch.jit.trace(Odd(), torch.rand(3)), [("x", (3,))])


class MoreOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)
        self.grouped = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2)
        self.head = nn.Linear(6, 4)

    def forward(self, x, y):                                  # x: (2, 3, 5, 5), y: (2, 6)
        u = self.up(x)                                        # (2, 2, 10, 10)
        g = self.grouped(torch.cat([u, u * 0.5], 1)).amax(dim=(2, 3))   # (2, 4)
        a, b = torch.chunk(g, 2, dim=1)
        s = torch.stack([a, b], dim=0).sum(0)                 # (2, 2)
        h = torch.addmm(self.head.bias, y, self.head.weight.t())          # (2, 4)
        m = torch.bmm(h.unsqueeze(2), h.unsqueeze(1))                     # (2, 4, 4)
        z = m.select(1, 2).squeeze() + h.expand(2, 4) - torch.maximum(h, g).pow(2)
        z = torch.log_softmax(1 - z, dim=-1) + torch.cat([s, s], 1).to(torch.float64).to(torch.float32)
        return z, torch.minimum(g, h).sum(dim=-1, keepdim=True)


def test_more_ops_match_torch():
    torch.manual_seed(6)
    model = MoreOps().eval()
    x, y = torch.rand(2, 3, 5, 5), torch.rand(2, 6)
    with torch.no_grad():
        traced = torch.jit.trace(model, (x, y))
        want = [w.numpy() for w in model(x, y)]
    mod, params = relay.frontend.from_pytorch(traced, [("x", (2, 3, 5, 5)), ("y", ([2, 6], "float32"))])
    _check(run_reference(mod, params, {"x": x.numpy(), "y": y.numpy()}), want)


class TinyDecoder(nn.Module):
    """The aten ops of BERT/GPT-2 traces (issue 32): embedding, arange position ids, cumsum over
    a mask, comparisons and &, gather, one-tensor index, new_ones, diff, and
    scaled_dot_product_attention with a causal flag and with a boolean mask."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(30, 16)
        self.pos = nn.Embedding(12, 16)
        self.qkv = nn.Linear(16, 48)

    def forward(self, ids, mask):
        seq = ids.shape[1]
        positions = torch.arange(seq).unsqueeze(0)
        run = torch.cumsum(mask, dim=1)
        h = self.tok(ids) + self.pos(positions)
        q, k, v = self.qkv(h).view(1, seq, 3, 2, 8).permute(2, 0, 3, 1, 4)
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        keep = (mask[:, None, None, :] == 1) & (run[:, None, None, :] >= 1) & (run[:, None, None, :] != 99)
        masked = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        picked = torch.gather(h, 1, ids[:, :4, None].expand(1, 4, 16) % seq)
        rows = h[:, torch.tensor([0, 2, 5])]
        ones = h.new_ones((2, 3))
        steps = torch.diff(run, dim=1)
        flags = (run <= 3).to(torch.float32) + (run > 1).to(torch.float32) + (run < 2).to(torch.float32) \
            + (ids >= 5).to(torch.float32)
        return causal, masked, picked, rows, ones, steps, flags


def test_transformer_aten_ops_match_torch():
    torch.manual_seed(7)
    model = TinyDecoder().eval()
    ids = torch.randint(0, 30, (1, 7))
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        traced = torch.jit.trace(model, (ids, mask))
        want = [w.numpy() for w in model(ids, mask)]
    mod, params = relay.frontend.from_pytorch(traced, [("ids", ([1, 7], "int64")), ("mask", ([1, 7], "int64"))])
    _check(run_reference(mod, params, {"ids": ids.numpy(), "mask": mask.numpy()}), want)


class MoreTransformerOps(nn.Module):
    """The rest of the aten ops of whole Hugging Face traces (BERT's mask builder, GPT-2's empty
    key/value cache and split, Whisper's 1-D convolutions): where with a scalar, zeros/ones/full,
    split by size and by sizes, indexing with several tensors (adjacent, apart, negative),
    cat beside an empty 1-d tensor, conv1d and conv_transpose1d."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=1)
        self.dil = nn.Conv1d(6, 6, 3, padding=2, dilation=2, groups=2)
        self.up = nn.ConvTranspose1d(6, 4, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x, mask):
        keep = mask[torch.zeros(1, 1, dtype=torch.int64), torch.arange(x.shape[2])[None, :]]  # (1, 1, L)
        scores = torch.where(keep.bool(), x, -1e4)
        a, b = scores.split(2, dim=1)
        c, d, e = scores.split([1, 2, 1], dim=1)
        pad = torch.zeros(2, 3) + torch.ones(2, 3) * torch.full((1, 3), 0.5)
        rows = x[:, torch.tensor([[0, 3], [1, -1]]), torch.tensor([1, 2])]  # adjacent: (1, 2, 2)
        apart = x[torch.tensor([0]), :, torch.tensor([-1, 2])]  # apart: broadcast axes first, (2, 4)
        cache = torch.cat([torch.tensor([]), x], dim=-1)
        y = self.up(F.gelu(self.dil(self.conv(x))))
        return a - b, c + d.sum(1, keepdim=True) - e, pad, rows, apart, cache, y


def test_more_transformer_ops_match_torch():
    torch.manual_seed(3)
    model = MoreTransformerOps().eval()
    x = torch.randn(1, 4, 10)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0, 0, 0]])
    with torch.no_grad():
        traced = torch.jit.trace(model, (x, mask))
        want = [w.numpy() for w in model(x, mask)]
    mod, params = relay.frontend.from_pytorch(traced, [("x", (1, 4, 10)), ("mask", ([1, 10], "int64"))])
    _check(run_reference(mod, params, {"x": x.numpy(), "mask": mask.numpy()}), want)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # transformers' Python shape checks
@pytest.mark.parametrize("name", ["bert", "gpt2", "vit", "whisper"])
def test_hugging_face_traces_match_torch(name):
    """Whole ``transformers`` models (one layer, width 32: bench/transformer_models.py's "test"
    size; BERT with a padding mask, GPT-2 with its causal mask and empty cache) traced by
    torch.jit.trace, imported, built and run against torch."""
    pytest.importorskip("transformers", reason="the Hugging Face traces need transformers")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from transformer_models import _config, _inputs

    torch.manual_seed(0)
    model = _config(name, "test").eval()
    inputs = _inputs(name, model, "test")

    class Last(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *xs):
            return self.inner(**dict(zip(inputs, xs))).last_hidden_state

    args = tuple(torch.from_numpy(v) for v in inputs.values())
    with torch.no_grad():
        traced = torch.jit.trace(Last(model), args, check_trace=False)
        want = Last(model)(*args).numpy()
    mod, params = relay.frontend.from_pytorch(traced, [(k, (list(v.shape), str(v.dtype))) for k, v in inputs.items()])
    got = run_built(mod, params, inputs)
    # Layer-normed outputs of order 1 from float32 sums of at most 64 terms.
    _check(got, [want])

