"""Issue 32 item 1: the architectures users export today import, build and match onnxruntime,
from both torch.onnx exporters (TorchScript at opset 17, dynamo at opset 18). ``transformers``
models from small configs (random weights, nothing downloaded): DistilBERT, RoBERTa, T5 and BART
(encoder-decoder, with an attention mask), wav2vec2 (feature extractor convs, GroupNorm, positional
conv); torchvision-style architectures in plain torch (its wheel does not import beside the CPU
torch): an R(2+1)D video network (3-D convs, pools) and a ResNet + FPN detection backbone
(lateral 1x1 convs, nearest upsampling, P6 max pool). BERT, GPT-2, ViT and Whisper at full size
are bench/transformers.py and tests/relay/test_transformer_gpu.py. Marked heavy: 14 cases, about
45 s on 2 cores (`make test-heavy`, or `pytest -m heavy` on this file). Also BERT exported with
dynamic batch and sequence axes by both exporters (issue 32 item 4)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the export corpus needs torch (pip install torch==2.13.0)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")
onnx = pytest.importorskip("onnx")
nn = torch.nn
F = torch.nn.functional

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402

pytestmark = [pytest.mark.heavy, pytest.mark.filterwarnings("ignore")]
SEQ = 12


def _text_inputs(decoder=False, offset=0):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 100, (1, SEQ)).astype(np.int64) + offset
    mask = np.ones((1, SEQ), np.int64)
    mask[0, 9:] = 0  # padding at the end: the mask matters
    inputs = {"input_ids": ids, "attention_mask": mask}
    if decoder:
        inputs["decoder_input_ids"] = ids[:, :5]
    return inputs


def _hf(name):
    hf = pytest.importorskip("transformers", reason="the Hugging Face models need transformers")
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=110,
                 max_position_embeddings=64, attn_implementation="eager")
    if name == "distilbert":
        return hf.DistilBertModel(hf.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, vocab_size=100,
                                                      max_position_embeddings=64, attn_implementation="eager")), \
            _text_inputs()
    if name == "roberta":
        return hf.RobertaModel(hf.RobertaConfig(**small)), _text_inputs(offset=2)  # ids above the padding id
    if name == "t5":
        return hf.T5Model(hf.T5Config(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, vocab_size=100,
                                      attn_implementation="eager")), _text_inputs(decoder=True)
    if name == "bart":
        return hf.BartModel(hf.BartConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                                          decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                          vocab_size=100, max_position_embeddings=64, attn_implementation="eager")), \
            _text_inputs(decoder=True)
    cfg = hf.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                            conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                            num_conv_pos_embedding_groups=4, attn_implementation="eager")
    return hf.Wav2Vec2Model(cfg), {"input_values": np.random.default_rng(0).standard_normal((1, 800)).astype("float32")}


class R2plus1D(nn.Module):
    """torchvision's video ResNets in small: (1, 7, 7) then (3, 1, 1) stem, a strided residual
    block of 3x3x3 convs with a 1x1x1 shortcut, max and adaptive average pooling, a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 8, (1, 7, 7), (1, 2, 2), (0, 3, 3), bias=False), nn.BatchNorm3d(8),
                                  nn.ReLU(), nn.Conv3d(8, 8, (3, 1, 1), 1, (1, 0, 0), bias=False), nn.BatchNorm3d(8),
                                  nn.ReLU())
        self.block = nn.Sequential(nn.Conv3d(8, 16, 3, 2, 1, bias=False), nn.BatchNorm3d(16), nn.ReLU(),
                                   nn.Conv3d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm3d(16))
        self.down = nn.Sequential(nn.Conv3d(8, 16, 1, 2, bias=False), nn.BatchNorm3d(16))
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        x = F.max_pool3d(F.relu(self.block(x) + self.down(x)), 3, 1, 1)
        return self.fc(self.pool(x).flatten(1))


class ResNetFPN(nn.Module):
    """A detection backbone: strided conv stages, FPN laterals with nearest top-down upsampling,
    3x3 output convs and the P6 max pool."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.c2 = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU())
        self.c3 = nn.Sequential(nn.Conv2d(32, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.ReLU())
        self.lat = nn.ModuleList([nn.Conv2d(c, 32, 1) for c in (16, 32, 64)])
        self.out = nn.ModuleList([nn.Conv2d(32, 32, 3, 1, 1) for _ in range(3)])

    def forward(self, x):
        f1 = self.c1(x)
        f2 = self.c2(f1)
        f3 = self.c3(f2)
        p3 = self.lat[2](f3)
        p2 = self.lat[1](f2) + F.interpolate(p3, size=f2.shape[-2:], mode="nearest")
        p1 = self.lat[0](f1) + F.interpolate(p2, size=f1.shape[-2:], mode="nearest")
        outs = [o(p) for o, p in zip(self.out, (p1, p2, p3))]
        return torch.cat([o.flatten(1) for o in outs + [F.max_pool2d(outs[-1], 1, 2, 0)]], 1)


def _vision(name):
    rng = np.random.default_rng(0)
    model = R2plus1D() if name == "r2plus1d" else ResNetFPN()
    for m in model.modules():  # running statistics that are not the identity
        if isinstance(m, (nn.BatchNorm2d, nn.BatchNorm3d)):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.8, 1.2)
    shape = (1, 3, 8, 32, 32) if name == "r2plus1d" else (1, 3, 64, 64)
    return model, {"x": rng.standard_normal(shape).astype("float32")}


class _Last(nn.Module):
    """The model's last hidden state (or its only output) as one plain tensor."""

    def __init__(self, inner, names, seq2seq):
        super().__init__()
        self.inner, self.names, self.seq2seq = inner, names, seq2seq

    def forward(self, *xs):
        kw = dict(zip(self.names, xs))
        if self.seq2seq:
            kw["use_cache"] = False
        out = self.inner(**kw)
        return out if isinstance(out, torch.Tensor) else out.last_hidden_state


MODELS = ["distilbert", "roberta", "t5", "bart", "wav2vec2", "r2plus1d", "resnet_fpn"]


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", MODELS)
def test_export_imports_and_matches_onnxruntime(name, dynamo):
    if dynamo:
        pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript")
    torch.manual_seed(0)
    model, inputs = _vision(name) if name in ("r2plus1d", "resnet_fpn") else _hf(name)
    wrapped = _Last(model, list(inputs), name in ("t5", "bart")).eval()  # eval: no training-mode Dropout
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapped, tuple(torch.from_numpy(v) for v in inputs.values()), buf, input_names=list(inputs),
                          output_names=["y"], opset_version=18 if dynamo else 17, dynamo=dynamo)
    want = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    mod, params = relay.frontend.from_onnx(onnx.load_from_string(buf.getvalue()),
                                           shape={k: v.shape for k, v in inputs.items()})
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    # Layer-normed (or batch-normed) outputs of order 1 from float32 sums of at most a few hundred terms.
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_dynamic_axes_bert_one_error_then_one_build_per_size(dynamo):
    """Issue 32 item 4 on a real export: batch and sequence left symbolic (dynamic_axes /
    dynamic_shapes); without sizes one error names every input and axis; with input_ids' size
    (the mask shares its symbols) each size builds and matches onnxruntime."""
    if dynamo:
        pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript")
    hf = pytest.importorskip("transformers", reason="the Hugging Face models need transformers")
    from kiln.errors import KilnError

    torch.manual_seed(0)
    bert = hf.BertModel(hf.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                      vocab_size=100, max_position_embeddings=64, attn_implementation="eager"))
    inputs = _text_inputs()
    names = list(inputs)
    if dynamo:
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence", max=64)
        kw = {"dynamic_shapes": {"xs": ({0: batch, 1: seq}, {0: batch, 1: seq})}}
    else:
        kw = {"dynamic_axes": {n: {0: "batch", 1: "sequence"} for n in names}}
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Last(bert, names, False).eval(), tuple(torch.from_numpy(v) for v in inputs.values()), buf,
                          input_names=names, output_names=["y"], opset_version=18 if dynamo else 17, dynamo=dynamo,
                          **kw)
    model = onnx.load_from_string(buf.getvalue())
    with pytest.raises(KilnError, match=r"'input_ids' axis 0 \(\w+\), axis 1 \(\w+\); 'attention_mask' axis 0"):
        relay.frontend.from_onnx(model)
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for size in ((1, 8), (2, 20)):
        feeds = {"input_ids": rng.integers(0, 100, size).astype(np.int64), "attention_mask": np.ones(size, np.int64)}
        feeds["attention_mask"][0, size[1] // 2:] = 0
        mod, params = relay.frontend.from_onnx(model, shape={"input_ids": size})
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target="llvm", params=params)
        m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        m.set_input(**feeds)
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), sess.run(None, feeds)[0], rtol=1e-4, atol=1e-4)
