"""The ``LM`` protocol every model runtime implements (the eager ``CausalLM``, the ExecuTorch
program), and the cache bookkeeping they share.

A runtime holds one KV cache at batch size 1: ``tokens`` are the ids whose keys and values it
holds, in order. ``extend`` appends and returns logits; ``rollback`` drops the newest tokens;
``prefill`` and ``sync`` are written here once on top of those. Knows positions and the
extend/rollback contract; nothing about tokenizers, sampling or strategies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """A Hugging Face model itself: a peft wrapper's base model, else ``model``."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def cache_kwarg(model: torch.nn.Module) -> str:
    """The name a Hugging Face model's forward takes its KV cache by: ``cache`` in recent
    transformers, ``past_key_values`` before (5.17 has only that, and drops an unknown ``cache=``
    into its kwargs unread: every call would then run without the cache). A peft wrapper passes
    either through: its base model's forward decides."""
    import inspect

    return "cache" if "cache" in inspect.signature(_unwrapped(model).forward).parameters else "past_key_values"


def model_device(model: torch.nn.Module) -> torch.device:
    """Where a Hugging Face model's weights are (a GPU for ``omnidraft distill --device cuda``):
    the device its inputs go to."""
    return _unwrapped(model).get_input_embeddings().weight.device


@dataclass
class Forward:
    logits: torch.Tensor  # [k, V] float32, row i = next-token logits after input position i
    hidden: torch.Tensor | None = None  # [k, H] float32, last layer (after final norm), or None
    accept: torch.Tensor | None = None  # [1] the acceptance head's P(accept) of the greedy next
    #                                     token, when the runtime computes it (ExecuTorch program)


class LM(Protocol):
    name: str
    tokens: list[int]  # the ids in the cache, in order
    scores_accept: bool  # extend() returns the acceptance head's P(accept) in Forward.accept

    @property
    def length(self) -> int: ...

    @property
    def max_length(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    def extend(self, ids: list[int], *, hidden: bool = False, last_only: bool = False) -> Forward:
        """Append ``ids`` (k >= 1) to the cache; logits [k, V] (or [1, V] with ``last_only``)."""

    def rollback(self, n: int) -> None:
        """Drop the last ``n`` cached tokens (0 <= n <= length)."""

    def truncate(self, length: int) -> None: ...

    def reset(self) -> None: ...

    def prefill(self, ids: list[int], *, hidden: bool = False) -> Forward: ...

    def sync(self, ids: list[int], *, hidden: bool = False) -> Forward: ...

    def input_embeddings(self) -> torch.Tensor | None:
        """[V, H] input embedding table (for an acceptance head outside the runtime), or None."""


def check_rollback(n: int, length: int) -> None:
    if n < 0 or n > length:
        raise ValueError(f"cannot roll back {n} tokens from a cache of {length}")


def prefill(lm: LM, ids: list[int], *, hidden: bool = False) -> Forward:
    """Reset ``lm``, run the whole prompt; the last position's logits [1, V] (and hidden [1, H])."""
    lm.reset()
    return lm.extend(ids, hidden=hidden, last_only=True)


def common_prefix(cached: list[int], ids: list[int]) -> int:
    """Length of the longest common prefix of ``cached`` and ``ids``."""
    if ids[:len(cached)] == cached:  # the usual case: the cache is a prefix of the context
        return len(cached)
    return next((i for i, (a, b) in enumerate(zip(cached, ids)) if a != b), min(len(cached), len(ids)))


def same_start(*lms: LM) -> Callable[[], None]:
    """For runs compared on one prompt: ``again = same_start(target, drafter)`` at the prompt, then
    ``again()`` before each run. Every model goes back to holding what it held at the prompt, as far
    as the runs since kept it (a generation keeps the cached prefix of its prompt: the previous
    prompt's shared prefix, a chat template's system prompt), so no run finds the prompt an earlier
    run on it left. Models that fork a fresh cache per generation hold nothing; a remote target
    (no cache here) is left alone."""
    held = [(lm, list(lm.tokens)) for lm in lms if hasattr(lm, "truncate")]

    def again() -> None:
        for lm, tokens in held:
            lm.truncate(common_prefix(lm.tokens, tokens))

    return again


def sync(lm: LM, ids: list[int], *, hidden: bool = False) -> Forward:
    """Make ``lm``'s cache hold ``ids`` and return the outputs after its last token only.

    Rolls back only to the longest common prefix with what is cached, then feeds the rest; at
    least one token is always fed so the last position's logits exist.
    """
    if not ids:
        raise ValueError("sync needs at least one token")
    common = min(common_prefix(lm.tokens, ids), len(ids) - 1)
    lm.truncate(common)
    return lm.extend(ids[common:], hidden=hidden, last_only=True)
