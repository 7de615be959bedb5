"""CausalLM: one Hugging Face causal LM at batch size 1 with a KV cache that extends and rolls back.

Every decoder (plain, speculative drafter, speculative target) drives models through this
wrapper. It knows tensors and caches; it does not know tokenizers, sampling or strategies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache


@dataclass
class Forward:
    logits: torch.Tensor  # [k, V] float32, row i = next-token logits after input position i
    hidden: torch.Tensor | None = None  # [k, H] float32, last layer (after final norm), or None
    accept: torch.Tensor | None = None  # [1] the acceptance head's P(accept) of the greedy next
    #                                     token, when the runtime computes it (ExecuTorch program)


class CausalLM:
    """A causal LM and its KV cache. ``length`` tokens are in the cache.

    ``extend(ids)`` appends tokens and returns logits for each of them; ``rollback(n)`` drops the
    last ``n`` cached tokens. Sliding-window layers (Gemma-3) keep every token in this cache, so
    any sequence of extends and rollbacks is exact: the attention mask, not eviction, applies the
    window (transformers' sliding cache layers keep one step of history and cannot roll back
    across several extends). ``fork()`` gives another generation its own cache over the same
    weights.
    """

    def __init__(self, model: torch.nn.Module, name: str = ""):
        self.model = model.eval()
        self.name = name or getattr(model.config, "_name_or_path", "") or model.config.model_type
        self.config = model.config
        self.tokens: list[int] = []  # the ids whose keys/values are in the cache, in order
        self.cache = self._new_cache()

    # ------------------------------------------------------------------ properties
    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def max_length(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 0) or 2048)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    # ------------------------------------------------------------------ cache control
    def _new_cache(self) -> DynamicCache:
        return DynamicCache()  # full layers only: see the class docstring

    def fork(self) -> "CausalLM":
        """A CausalLM over the same weights with its own empty cache (per-generation state)."""
        return CausalLM(self.model, self.name)

    def reset(self) -> None:
        self.tokens = []
        self.cache = self._new_cache()

    def rollback(self, n: int) -> None:
        """Drop the last ``n`` tokens from the cache (0 <= n <= length)."""
        if n < 0 or n > self.length:
            raise ValueError(f"cannot roll back {n} tokens from a cache of {self.length}")
        if n == 0:
            return
        if n == self.length:
            self.reset()
            return
        self.cache.crop(-n)
        del self.tokens[-n:]

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` cached tokens."""
        self.rollback(self.length - length)

    # ------------------------------------------------------------------ forward
    @torch.inference_mode()
    def extend(self, ids: list[int], *, hidden: bool = False, last_only: bool = False) -> Forward:
        """Append ``ids`` (k >= 1 tokens) to the cache; logits [k, V] (or [1, V] with last_only)."""
        k = len(ids)
        if k == 0:
            raise ValueError("extend needs at least one token")
        if self.length + k > self.max_length:
            raise ValueError(
                f"{self.name}: {self.length + k} tokens exceed the context window of {self.max_length}")
        input_ids = torch.tensor([ids], dtype=torch.long)  # [1, k]
        position_ids = torch.arange(self.length, self.length + k).unsqueeze(0)  # [1, k]
        try:
            out = self.model(
                input_ids=input_ids,
                position_ids=position_ids,
                past_key_values=self.cache,
                use_cache=True,
                output_hidden_states=hidden,
                logits_to_keep=1 if last_only else 0,
            )
        except BaseException:  # interrupted mid-forward: drop whatever the layers appended
            extra = self.cache.get_seq_length() - self.length
            if extra > 0:
                self.cache.crop(-extra)
            raise
        self.tokens.extend(int(t) for t in ids)
        logits = out.logits[0].float()  # [k or 1, V]
        hs = out.hidden_states[-1][0].float() if hidden else None  # [k, H]
        if hs is not None and last_only:
            hs = hs[-1:]
        return Forward(logits=logits, hidden=hs)

    def prefill(self, ids: list[int], *, hidden: bool = False) -> Forward:
        """Reset, then run the whole prompt; returns the last position's logits [1, V]."""
        self.reset()
        return self.extend(ids, hidden=hidden, last_only=True)

    def sync(self, ids: list[int], *, hidden: bool = False) -> Forward:
        """Make the cache hold ``ids`` and return the logits [1, V] (and hidden [1, H]) after its
        last token only.

        Rolls back only to the longest common prefix with what is cached, then feeds the rest;
        at least one token is always fed so the last position's logits exist.
        """
        return sync_prefix(self, ids, hidden=hidden)


def sync_prefix(lm, ids: list[int], *, hidden: bool = False) -> Forward:
    """``lm.sync``: roll ``lm`` (anything with tokens/truncate/extend) back to its longest common
    prefix with ``ids`` and feed the rest, keeping at least one token to feed."""
    if not ids:
        raise ValueError("sync needs at least one token")
    common, limit = 0, min(lm.length, len(ids) - 1)
    while common < limit and lm.tokens[common] == ids[common]:
        common += 1
    lm.truncate(common)
    return lm.extend(ids[common:], hidden=hidden, last_only=True)
