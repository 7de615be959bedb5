"""CausalLM: one Hugging Face causal LM at batch size 1 with a KV cache that extends and rolls back
(the eager runtime of the ``LM`` protocol, models/lm.py).

Every decoder (plain, speculative drafter, speculative target) can drive models through this
wrapper. A model on a GPU (``omnidraft distill --device cuda``'s target) takes its inputs there and
answers there; decoding runs models on the CPU. It knows tensors and caches; it does not know
tokenizers, sampling or strategies.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from omnidraft.models import lm as lm_ops
from omnidraft.models.lm import Forward


class CausalLM:
    """A causal LM and its KV cache. ``length`` tokens are in the cache.

    ``extend(ids)`` appends tokens and returns logits for each of them; ``rollback(n)`` drops the
    last ``n`` cached tokens. Sliding-window layers (Gemma-3) keep every token in this cache, so
    any sequence of extends and rollbacks is exact: the attention mask, not eviction, applies the
    window (transformers' sliding cache layers keep one step of history and cannot roll back
    across several extends). ``fork()`` gives another generation its own cache over the same
    weights.
    """

    scores_accept = False  # an acceptance head, if any, runs outside (input_embeddings)

    def __init__(self, model: torch.nn.Module, name: str = ""):
        self.model = model.eval()
        self.name = name or getattr(model.config, "_name_or_path", "") or model.config.model_type
        self.config = model.config
        self.tokens: list[int] = []  # the ids whose keys/values are in the cache, in order
        self.cache = self._new_cache()
        self._cache_kw = lm_ops.cache_kwarg(model)

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

    def input_embeddings(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight  # [V, H]

    def rollback(self, n: int) -> None:
        """Drop the last ``n`` tokens from the cache (0 <= n <= length)."""
        lm_ops.check_rollback(n, self.length)
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
        dev = lm_ops.model_device(self.model)
        input_ids = torch.tensor([ids], dtype=torch.long, device=dev)  # [1, k]
        position_ids = torch.arange(self.length, self.length + k, device=dev).unsqueeze(0)  # [1, k]
        try:
            out = self.model(
                input_ids=input_ids,
                position_ids=position_ids,
                **{self._cache_kw: self.cache},
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
        logits = out.logits[0].float()  # [k or 1, V], on the model's device
        hs = out.hidden_states[-1][0].float() if hidden else None  # [k, H]
        if hs is not None and last_only:
            hs = hs[-1:]
        return Forward(logits=logits, hidden=hs)

    def prefill(self, ids: list[int], *, hidden: bool = False) -> Forward:
        return lm_ops.prefill(self, ids, hidden=hidden)

    def sync(self, ids: list[int], *, hidden: bool = False) -> Forward:
        return lm_ops.sync(self, ids, hidden=hidden)
