"""Transformer models as a new user exports them: Hugging Face ``transformers`` models built from
their configs (random weights, nothing downloaded), exported by ``torch.onnx.export``.

    model, inputs = export("bert", size="base")        # onnx.ModelProto, {name: np.ndarray}

``size="base"`` is the published architecture (BERT-base, GPT-2 small, ViT-B/16, Whisper-tiny's
encoder); ``size="tiny"`` keeps every op and shape pattern at a width and depth that builds in
seconds; ``size="test"`` is smaller still (one layer, width 32: the ONNX files kept in
tests/relay/data/transformers/, written by ``python bench/transformer_models.py DIR``). Needs ``torch`` (pin ``torch==2.13.0``: a plain ``pip install torch`` pulls a
CUDA build of several GB) and ``transformers``.
"""

from __future__ import annotations

import io

import numpy as np

SEQ = {"bert": 128, "gpt2": 64}


def _hf():
    """The ``transformers`` package, not bench/transformers.py: run as a script from bench/, this
    directory is first on sys.path and its benchmark of that name would shadow the package."""
    import importlib
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    cached = sys.modules.get("transformers")
    if cached is not None and Path(getattr(cached, "__file__", "") or "").resolve().parent == here:
        del sys.modules["transformers"]
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    try:
        return importlib.import_module("transformers")
    finally:
        sys.path[:] = saved


def _config(name: str, size: str):
    hf = _hf()

    base = size == "base"
    if size == "test":
        return _test_config(name)
    if name == "bert":
        kw = {} if base else dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                  vocab_size=512, max_position_embeddings=128)
        return hf.BertModel(hf.BertConfig(**kw, attn_implementation="eager"))
    if name == "gpt2":
        kw = {} if base else dict(n_embd=64, n_layer=2, n_head=4, vocab_size=512, n_positions=128)
        return hf.GPT2Model(hf.GPT2Config(**kw, attn_implementation="eager"))
    if name == "vit":
        kw = {} if base else dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                  image_size=32, patch_size=8)
        return hf.ViTModel(hf.ViTConfig(**kw, attn_implementation="eager"), add_pooling_layer=False)
    if name == "whisper":
        kw = dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536, num_mel_bins=80,
                  max_source_positions=1500)
        if not base:
            kw = dict(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128, num_mel_bins=16,
                      max_source_positions=32)
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        return WhisperEncoder(hf.WhisperConfig(**kw, attn_implementation="eager"))
    raise ValueError(f"unknown model {name!r}; one of bert, gpt2, vit, whisper")


def _test_config(name: str):
    hf = _hf()

    if name == "bert":
        return hf.BertModel(hf.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=64, vocab_size=64, max_position_embeddings=32,
                                          attn_implementation="eager"))
    if name == "gpt2":
        return hf.GPT2Model(hf.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=32,
                                          bos_token_id=0, eos_token_id=0, attn_implementation="eager"))
    if name == "vit":
        return hf.ViTModel(hf.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                        image_size=20, patch_size=4, attn_implementation="eager"),
                           add_pooling_layer=False)
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    return WhisperEncoder(hf.WhisperConfig(d_model=32, encoder_layers=1, encoder_attention_heads=2,
                                           decoder_attention_heads=2, encoder_ffn_dim=64, num_mel_bins=8,
                                           max_source_positions=24, attn_implementation="eager"))


def _inputs(name: str, model, size: str) -> dict:
    rng = np.random.default_rng(0)
    cfg = model.config
    if name in ("bert", "gpt2"):
        seq = {"base": SEQ[name], "tiny": 16, "test": 12}[size]
        ids = rng.integers(0, cfg.vocab_size, (1, seq), dtype=np.int64)
        if name == "gpt2":
            return {"input_ids": ids}
        mask = np.ones((1, seq), dtype=np.int64)
        mask[0, seq * 3 // 4:] = 0  # padding at the end: the mask matters
        return {"input_ids": ids, "attention_mask": mask}
    if name == "vit":
        return {"pixel_values": rng.standard_normal((1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)}
    frames = 2 * cfg.max_source_positions
    return {"input_features": rng.standard_normal((1, cfg.num_mel_bins, frames)).astype(np.float32)}


def export(name: str, size: str = "base", dynamo: bool = False, opset: int | None = None):
    """(onnx.ModelProto, inputs) of ``name`` (bert, gpt2, vit, whisper) with random weights.

    ``opset`` defaults to 17 for the TorchScript exporter and 18 for the dynamo one, whose
    down-conversion to 17 leaves opset-18 attributes behind (GPT-2's Split keeps num_outputs,
    which onnxruntime refuses at opset 17)."""
    import onnx
    import torch

    opset = opset or (18 if dynamo else 17)

    torch.manual_seed(0)
    model = _config(name, size).eval()
    inputs = _inputs(name, model, size)
    args = tuple(torch.from_numpy(v) for v in inputs.values())

    class Last(torch.nn.Module):  # the last hidden state only: one output, a plain tensor
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *xs):
            return self.inner(**dict(zip(inputs, xs))).last_hidden_state

    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(Last(model), args, buf, input_names=list(inputs), output_names=["last_hidden_state"],
                          opset_version=opset, dynamo=dynamo)
    return onnx.load_from_string(buf.getvalue()), inputs


def main() -> None:
    """Write the ``size="test"`` exports (TorchScript exporter) and their inputs into a folder."""
    import sys
    from pathlib import Path

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/relay/data/transformers")
    out.mkdir(parents=True, exist_ok=True)
    for name in ("bert", "gpt2", "vit", "whisper"):
        model, inputs = export(name, "test")
        (out / f"{name}.onnx").write_bytes(model.SerializeToString())
        np.savez(out / f"{name}_inputs.npz", **inputs)
        print(f"{out / name}.onnx: {len(model.graph.node)} nodes")
    model, _ = export("bert", "test", dynamo=True, opset=18)  # the other exporter (needs onnxscript)
    (out / "bert_dynamo.onnx").write_bytes(model.SerializeToString())


if __name__ == "__main__":
    import sys
    from pathlib import Path

    # bench/transformers.py would shadow the ``transformers`` package
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    main()
