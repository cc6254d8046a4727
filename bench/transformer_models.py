"""Transformer models as a new user exports them: Hugging Face ``transformers`` models built from
their configs (random weights, nothing downloaded), exported by ``torch.onnx.export``.

    model, inputs = export("bert", size="base")        # onnx.ModelProto, {name: np.ndarray}

``size="base"`` is the published architecture (BERT-base, GPT-2 small, ViT-B/16, Whisper-tiny's
encoder); ``size="tiny"`` keeps every op and shape pattern at a width and depth that builds in
seconds (tests). Needs ``torch`` (pin ``torch==2.13.0``: a plain ``pip install torch`` pulls a
CUDA build of several GB) and ``transformers``.
"""

from __future__ import annotations

import io

import numpy as np

SEQ = {"bert": 128, "gpt2": 64}


def _config(name: str, size: str):
    import transformers as hf

    base = size == "base"
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


def _inputs(name: str, model, size: str) -> dict:
    rng = np.random.default_rng(0)
    cfg = model.config
    if name in ("bert", "gpt2"):
        seq = SEQ[name] if size == "base" else 16
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


def export(name: str, size: str = "base", dynamo: bool = False, opset: int = 17):
    """(onnx.ModelProto, inputs) of ``name`` (bert, gpt2, vit, whisper) with random weights."""
    import onnx
    import torch

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
