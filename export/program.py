"""The drafter as one exportable module: a static KV cache in registered buffers and
``forward(ids, pos)`` that serves prefill and decode, returning the last position's logits, its
hidden state and the acceptance head's P(accept) for the greedy next token.

Attention runs on ExecuTorch's LLM custom ops (``llama::update_cache`` writes the new keys and
values into the cache in place, ``llama::custom_sdpa`` attends only to positions <= the query's),
so a decode step costs what the filled part of the cache costs, not the whole static length.
Knows the Hugging Face model, its (peft) LoRA layers and the acceptance head; nothing about
lowering, files or the decode loop.
"""

from __future__ import annotations

import torch
from torch import nn

# Parameter names that belong to the per-target part of the program (LoRA and head): they stay
# outside the XNNPACK partition and go to the swappable .ptd file.
ADAPTER_MARKERS = ("lora_A", "lora_B", "accept_head.")
ATTENTION = "omnidraft_et_sdpa"


def is_adapter_param(name: str) -> bool:
    return any(m in name for m in ADAPTER_MARKERS)


def _et_attention(module, query, key_cache, value_cache, attention_mask, scaling=None, dropout=0.0,
                  et_start_pos=None, **kwargs):
    """HF attention interface on the custom op. query [B, Hq, T, D]; key/value_cache
    [B, max_seq, Hkv, D] (what StaticKV.update returns). Returns ([B, T, Hq, D], None)."""
    out = torch.ops.llama.custom_sdpa(query.transpose(1, 2), key_cache, value_cache, et_start_pos,
                                      None, 0.0, True, scaling)
    return out, None


def _register_attention() -> None:
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - registers llama::*
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _et_attention)


class StaticKV(nn.Module):
    """Per-layer key/value buffers [1, max_seq, Hkv, D], updated in place at ``start_pos``.
    Stands in for the HF cache object (the model only calls ``update``)."""

    def __init__(self, n_layers: int, max_seq: int, kv_heads: int, head_dim: int, dtype: torch.dtype):
        super().__init__()
        self.n_layers = n_layers
        for i in range(n_layers):
            self.register_buffer(f"k_{i}", torch.zeros(1, max_seq, kv_heads, head_dim, dtype=dtype), persistent=False)
            self.register_buffer(f"v_{i}", torch.zeros(1, max_seq, kv_heads, head_dim, dtype=dtype), persistent=False)
        self.start_pos = 0  # set by the program before each forward (a symbolic int when exported)

    def update(self, key, value, layer_idx, *args, **kwargs):
        """key, value: [1, Hkv, T, D] -> the layer's whole caches [1, max_seq, Hkv, D]."""
        kc, vc = getattr(self, f"k_{layer_idx}"), getattr(self, f"v_{layer_idx}")
        torch.ops.llama.update_cache(key.transpose(1, 2), kc, self.start_pos)
        torch.ops.llama.update_cache(value.transpose(1, 2), vc, self.start_pos)
        return kc, vc

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.start_pos


class DraftProgram(nn.Module):
    """``forward(ids [1, T] int64, pos [1] int64)`` writes T tokens into the cache at positions
    pos..pos+T-1 and returns (logits [1, V] float32, hidden [1, H] float32, accept [1] float32)
    for the last of them. Positions past ``pos`` are never attended to, so rolling back is just
    calling with a smaller ``pos``.

    ``lm``: a Hugging Face causal LM, optionally with peft LoRA layers injected (pass
    ``peft_model.get_base_model()``); its attention is switched to the custom op in place.
    ``head``: an AcceptanceHead (weights in the .ptd). ``ranker``: a SpecVocabHead; then exact
    logits are computed only on its top ``k_vocab`` candidates and every other logit is -inf
    (the LM head then stays fp32: rows are gathered).
    """

    def __init__(self, lm: nn.Module, head: nn.Module, max_seq: int, ranker: nn.Module | None = None,
                 k_vocab: int = 2048):
        super().__init__()
        _register_attention()
        self.lm = lm.eval()
        self.lm.config._attn_implementation = ATTENTION
        self.accept_head = head.eval()
        self.specvocab_ranker = ranker
        self.k_vocab = k_vocab
        self.max_seq = max_seq
        config = lm.config.get_text_config()
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.kv = StaticKV(config.num_hidden_layers, max_seq, config.num_key_value_heads, head_dim,
                           next(lm.parameters()).dtype)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor):
        start = pos[0].item()
        torch._check_is_size(start)
        torch._check(start + ids.shape[1] <= self.max_seq)
        self.kv.start_pos = start
        positions = (torch.arange(ids.shape[1]) + pos[0]).unsqueeze(0)  # [1, T]
        out = self.lm.model(input_ids=ids, position_ids=positions, past_key_values=self.kv,
                            use_cache=True, et_start_pos=start)
        hidden = out.last_hidden_state[:, -1, :]  # [1, H], after the final norm
        if self.specvocab_ranker is None:
            logits = self.lm.lm_head(hidden).float()  # [1, V]
        else:
            W = self.lm.lm_head.weight  # [V, H]
            cand = torch.topk(self.specvocab_ranker(hidden), self.k_vocab, dim=-1).indices  # [1, k]
            exact = W.index_select(0, cand[0]) @ hidden[0]  # [k]
            logits = torch.full((1, W.shape[0]), float("-inf")).scatter(1, cand, exact.unsqueeze(0).float())
        top = logits.argmax(-1)  # [1]
        emb = self.lm.model.embed_tokens(top)  # [1, H]
        score = self.accept_head(hidden.float(), emb.float())  # [1]
        accept = torch.sigmoid(score + self.accept_head.logit_shift)  # [1]
        return logits, hidden.float(), accept
