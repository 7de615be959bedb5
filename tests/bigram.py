"""A small random neural bigram LM over a real tokenizer's vocabulary, for the statistical tests.

Its next-token logits depend on the last token only (``bias + scale * E[last] @ W``, rank 8), so
one forward over a 150k vocabulary costs a few hundred microseconds and the exact distribution of
any continuation is known in closed form: thousands of generations fit in a unit test. ``favour``
puts most of the mass on a few chosen ids with a shared preference order, so a drafter and a
target built with the same strings agree often enough to exercise acceptance, bonus and
correction tokens at every draft position. It implements the LM protocol (models/lm.py) and ``fork``; it has no KV cache to hold.
"""

from __future__ import annotations

import math

import torch

from omnidraft.models import lm as lm_ops
from omnidraft.models.lm import Forward


class BigramLM:
    scores_accept = False
    batch_invariant = True  # a row of a table per token: the same logits however a prompt is split

    def __init__(self, vocab: int, favour: dict[int, float], *, seed: int, noise: float = 0.8,
                 rest_mass: float = 0.02, max_length: int = 1024, name: str = "bigram"):
        """``favour``: id -> preference (added to the logit); the favoured ids together get
        about 1 - ``rest_mass`` of the probability at temperature 1."""
        g = torch.Generator().manual_seed(seed)
        self.name, self.vocab_size, self.max_length = name, vocab, max_length
        self.E = torch.randn(vocab, 8, generator=g) / math.sqrt(8)  # [V, 8]
        self.W = torch.randn(8, vocab, generator=g) * noise  # [8, V]
        ids = torch.tensor(list(favour), dtype=torch.long)
        pref = torch.tensor(list(favour.values()))
        spread = math.exp(noise ** 2 / 2)  # E[exp(noise logit)]
        base = math.log((1 - rest_mass) / rest_mass * vocab * spread / float(pref.exp().sum()))
        self.bias = torch.zeros(vocab)
        self.bias[ids] = base + pref
        self.rows: dict[int, torch.Tensor] = {}  # last token -> [V] logits, a bounded memo
        self.tokens: list[int] = []
        self.model = None  # no generation config: the tokenizer's EOS is the stop id

    @property
    def length(self) -> int:
        return len(self.tokens)

    def fork(self) -> "BigramLM":
        twin = object.__new__(BigramLM)
        twin.__dict__.update(self.__dict__)
        twin.tokens = []
        return twin

    def logits_after(self, ids: list[int]) -> torch.Tensor:
        """[len(ids), V] next-token logits after each of ``ids``."""
        out = []
        for i in ids:
            row = self.rows.get(i)
            if row is None:
                row = self.rows[i] = self.bias + self.E[i] @ self.W
            out.append(row)
        while len(self.rows) > 512:  # bounded: drop the oldest rows
            self.rows.pop(next(iter(self.rows)))
        return out[0].unsqueeze(0) if len(out) == 1 else torch.stack(out)

    def extend(self, ids: list[int], *, hidden: bool = False, last_only: bool = False) -> Forward:
        if not ids:
            raise ValueError("extend needs at least one token")
        if self.length + len(ids) > self.max_length:
            raise ValueError(f"{self.length + len(ids)} tokens exceed the context window of {self.max_length}")
        self.tokens.extend(int(t) for t in ids)
        logits = self.logits_after(ids[-1:] if last_only else list(ids))
        return Forward(logits=logits)

    def reset(self) -> None:
        self.tokens = []

    def input_embeddings(self) -> None:
        return None

    def rollback(self, n: int) -> None:
        lm_ops.check_rollback(n, self.length)
        del self.tokens[len(self.tokens) - n:]

    def truncate(self, length: int) -> None:
        self.rollback(self.length - length)

    def prefill(self, ids: list[int], *, hidden: bool = False) -> Forward:
        return lm_ops.prefill(self, ids)

    def sync(self, ids: list[int], *, hidden: bool = False) -> Forward:
        return lm_ops.sync(self, ids)
