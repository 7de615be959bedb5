"""A tiny Qwen2 GGUF for the llama.cpp runtime's tests: a small random Hugging Face Qwen2 model's
weights (F32) written with the `gguf` package under llama.cpp's tensor names, with the real
Qwen2.5 tokenizer's metadata copied from the packaged GGUF, so llama.cpp runs it on the real
vocabulary. ``head_scale`` sharpens the output head: a random model's next-token distribution is
otherwise nearly uniform over 151k ids, and a statistical test needs it concentrated.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                  "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
                  "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token")


def write_tiny_qwen2(model, real_gguf: Path, out: Path, head_scale: float = 1.0) -> Path:
    """Write ``model`` (a transformers Qwen2ForCausalLM) as an F32 GGUF at ``out``."""
    import gguf

    cfg = model.config
    reader = gguf.GGUFReader(str(real_gguf))
    w = gguf.GGUFWriter(str(out), "qwen2")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]) if getattr(cfg, "rope_parameters", None)
                         else float(cfg.rope_theta))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for key in TOKENIZER_KEYS:
        field = reader.fields[key]
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            w.add_array(key, field.contents())
        else:
            w.add_key_value(key, field.contents(), kind)
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    parts = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
             "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
             "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
             "self_attn.o_proj.weight": "attn_output.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
             "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    for i in range(cfg.num_hidden_layers):
        names.update({f"model.layers.{i}.{hf}": f"blk.{i}.{g}" for hf, g in parts.items()})
    for hf, name in names.items():
        w.add_tensor(name, np.ascontiguousarray(state[hf]))
    head = state.get("lm_head.weight", state["model.embed_tokens.weight"])
    w.add_tensor("output.weight", np.ascontiguousarray(head * head_scale))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
