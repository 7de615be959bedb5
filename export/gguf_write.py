"""GGUF files of our own for llama.cpp, written with the `gguf` package: a Hugging Face Qwen2
model's weights (F32) under llama.cpp's tensor names (the llama.cpp runtime's tests), or a
Qwen2-shaped model of any size with random Q4_0 weights (what a large GGUF costs here, without
one to download). Both carry the tokenizer of a real GGUF (its metadata copied), so llama.cpp
runs them on a real vocabulary.

Knows llama.cpp's qwen2 tensor names and GGUF metadata keys; nothing about running models.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                  "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
                  "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token")
LAYER = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
         "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
         "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
         "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
         "self_attn.o_proj.weight": "attn_output.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
         "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


@dataclass(frozen=True)
class Shape:
    """A Qwen2 model's dimensions (Qwen2.5-7B: Shape(3584, 18944, 28, 28, 4, 152064))."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    context: int = 32768
    rope_theta: float = 1e6
    rms_eps: float = 1e-6


def _writer(out: Path, shape: Shape, real_gguf: Path, file_type: int):
    """A GGUFWriter with the qwen2 architecture keys of ``shape`` and ``real_gguf``'s tokenizer."""
    import gguf

    w = gguf.GGUFWriter(str(out), "qwen2")
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.intermediate)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(shape.rms_eps)
    w.add_file_type(file_type)
    reader = gguf.GGUFReader(str(real_gguf))
    for key in TOKENIZER_KEYS:
        field = reader.fields[key]
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_array(key, field.contents())
        else:
            w.add_key_value(key, field.contents(), field.types[0])
    return w


def write_hf_qwen2(model, real_gguf: Path, out: Path) -> Path:
    """``model`` (a transformers Qwen2ForCausalLM) as an F32 GGUF at ``out``."""
    import gguf

    cfg = model.config
    theta = (cfg.rope_parameters or {}).get("rope_theta") if hasattr(cfg, "rope_parameters") else cfg.rope_theta
    shape = Shape(cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                  cfg.num_key_value_heads, cfg.vocab_size, cfg.max_position_embeddings, float(theta), cfg.rms_norm_eps)
    w = _writer(out, shape, real_gguf, gguf.LlamaFileType.ALL_F32)
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             **{f"model.layers.{i}.{hf}": f"blk.{i}.{g}" for i in range(shape.layers) for hf, g in LAYER.items()}}
    for hf, name in names.items():
        w.add_tensor(name, np.ascontiguousarray(state[hf]))
    w.add_tensor("output.weight", np.ascontiguousarray(state.get("lm_head.weight", state["model.embed_tokens.weight"])))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def write_random_q4_0(shape: Shape, real_gguf: Path, out: Path, seed: int = 0, scale: float = 0.02) -> Path:
    """A ``shape`` model with random Q4_0 weights (blocks of 32: an f16 ``scale`` and 16 bytes of
    random nibbles, written directly: no float copy of the model is ever held), norms at 1 and
    biases at 0, streamed tensor by tensor to ``out``."""
    import gguf

    q4 = gguf.GGMLQuantizationType.Q4_0
    block, size = gguf.GGML_QUANT_SIZES[q4]
    kv = shape.hidden // shape.heads * shape.kv_heads
    mats = {"token_embd.weight": (shape.vocab, shape.hidden), "output.weight": (shape.vocab, shape.hidden)}
    vecs = {"output_norm.weight": shape.hidden}
    for i in range(shape.layers):
        mats.update({f"blk.{i}.attn_q.weight": (shape.hidden, shape.hidden), f"blk.{i}.attn_k.weight": (kv, shape.hidden),
                     f"blk.{i}.attn_v.weight": (kv, shape.hidden), f"blk.{i}.attn_output.weight": (shape.hidden, shape.hidden),
                     f"blk.{i}.ffn_gate.weight": (shape.intermediate, shape.hidden),
                     f"blk.{i}.ffn_up.weight": (shape.intermediate, shape.hidden),
                     f"blk.{i}.ffn_down.weight": (shape.hidden, shape.intermediate)})
        vecs.update({f"blk.{i}.attn_norm.weight": shape.hidden, f"blk.{i}.ffn_norm.weight": shape.hidden,
                     f"blk.{i}.attn_q.bias": shape.hidden, f"blk.{i}.attn_k.bias": kv, f"blk.{i}.attn_v.bias": kv})
    w = _writer(out, shape, real_gguf, gguf.LlamaFileType.MOSTLY_Q4_0)
    for name, (rows, cols) in mats.items():
        w.add_tensor_info(name, (rows, cols // block * size), np.dtype(np.uint8), rows * cols // block * size, q4)
    for name, n in vecs.items():
        w.add_tensor_info(name, (n,), np.dtype(np.float32), n * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    scale_bytes = np.frombuffer(np.float16(scale).tobytes(), dtype=np.uint8)
    for name, (rows, cols) in mats.items():
        blocks = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
        blocks[:, :2] = scale_bytes
        w.write_tensor_data(blocks.reshape(rows, cols // block * size))
    for name, n in vecs.items():
        w.write_tensor_data(np.ones(n, np.float32) if "norm" in name else np.zeros(n, np.float32))
    w.close()
    return out
