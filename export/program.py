"""The drafter as one exportable module: a static KV cache in registered buffers and
``forward(ids, pos)`` that serves prefill and decode, returning the last position's logits, its
hidden state and the acceptance head's P(accept) for the greedy next token.

Knows the Hugging Face model, its (peft) LoRA layers and the acceptance head; nothing about
lowering, files or the decode loop.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import StaticCache

# Parameter names that belong to the per-target part of the program (LoRA and head): they stay
# outside the XNNPACK partition and go to the swappable .ptd file.
ADAPTER_MARKERS = ("lora_A", "lora_B", "accept_head.")


def is_adapter_param(name: str) -> bool:
    return any(m in name for m in ADAPTER_MARKERS)


class DraftProgram(nn.Module):
    """``forward(ids [1, T] int64, pos [1] int64)`` writes T tokens into the cache at positions
    pos..pos+T-1 and returns (logits [1, V] float32, hidden [1, H] float32, accept [1] float32)
    for the last of them. Tokens cached past ``pos`` are ignored (the causal mask hides them),
    so rolling back is just calling with a smaller ``pos``.

    ``lm``: a Hugging Face causal LM, optionally with peft LoRA layers injected (pass
    ``peft_model.get_base_model()``). ``head``: an AcceptanceHead (weights in the .ptd).
    """

    def __init__(self, lm: nn.Module, head: nn.Module, max_seq: int):
        super().__init__()
        self.lm = lm.eval()
        self.accept_head = head.eval()
        self.max_seq = max_seq
        config = lm.config.get_text_config()
        self.cache = StaticCache(max_cache_len=max_seq, config=config)
        dtype = next(lm.parameters()).dtype
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.cache.early_initialization(1, config.num_key_value_heads, head_dim, dtype, torch.device("cpu"))
        for i, layer in enumerate(self.cache.layers):  # buffers, so export treats them as state
            self.register_buffer(f"key_cache_{i}", layer.keys, persistent=False)
            self.register_buffer(f"value_cache_{i}", layer.values, persistent=False)
            self.register_buffer(f"cumulative_length_{i}", layer.cumulative_length, persistent=False)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor):
        for layer in self.cache.layers:
            layer.cumulative_length.copy_(pos[0])
        out = self.lm.model(input_ids=ids, past_key_values=self.cache, use_cache=True)
        hidden = out.last_hidden_state[:, -1, :]  # [1, H], after the final norm
        logits = self.lm.lm_head(hidden).float()  # [1, V]
        top = logits.argmax(-1)  # [1]
        emb = self.lm.model.embed_tokens(top)  # [1, H]
        score = self.accept_head(hidden.float(), emb.float())  # [1]
        accept = torch.sigmoid(score + self.accept_head.logit_shift)  # [1]
        return logits, hidden.float(), accept
