"""The verifying side of speculative decoding: holds the target's KV cache and turns a proposal
into a Verdict. ``LocalTarget`` runs in-process; a remote target speaks the same protocol.

Cache discipline: the cache holds the committed context except its last token (``pending``);
each verify feeds [pending, t_1..t_m], so one forward yields all m+1 target rows. The first
verify after ``start`` is the exception: the prompt prefill already ran the pending token and
kept its logits row, so it feeds only the proposal (a round without one needs no forward at all,
and a generation costs the target the forwards `ar` pays). The prefill keeps the longest prefix of
the prompt the cache already holds (a chat template's system prompt, say), as `ar` does.
Knows models and verification; nothing about drafters or vocabularies.
"""

from __future__ import annotations

from typing import Protocol

import torch

from omnidraft.decode.modes import check_verify_mode
from omnidraft.models.lm import LM
from omnidraft.sampling import LazyProbs, PositionDraws, SamplingConfig
from omnidraft.decode.text import model_eos_ids
from omnidraft.decode.verify import Verdict, verify_greedy, verify_point_mass, verify_rejection


ROWS = 8  # rows of topk_rows' softmax at once


def topk_rows(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, V] target logits -> ([n, k] ids, [n, k] probs) of the softmax (temperature 1), ROWS
    rows at a time: no [n, V] copy beside the logits (20 MB at 33 rows of a 151,936 vocabulary),
    the same bits and nearly the speed of one batched softmax."""
    tops = [torch.topk(torch.softmax(block.float(), dim=-1), k, dim=-1) for block in logits.split(ROWS)]
    if len(tops) == 1:
        return tops[0].indices, tops[0].values
    return torch.cat([t.indices for t in tops]), torch.cat([t.values for t in tops])


class Target(Protocol):
    """The verifying side as the decode loop sees it: in-process (LocalTarget), remote
    (remote/remote.py, remote/openai_api.py) or a remote one with a local fallback. It carries the
    sampling it verifies with, so the drafter samples with the same settings."""

    mode: str  # verification when sampling: "rejection" | "point-mass" (decode/modes.py)
    sampling: SamplingConfig

    @property
    def vocab_size(self) -> int: ...

    @property
    def max_length(self) -> int: ...

    @property
    def needs_q(self) -> bool:
        """Rejection sampling: verify needs q' [m, V] with every proposal."""

    @property
    def eos_ids(self) -> set[int]:
        """The model's own end-of-sequence ids (generation config)."""

    @property
    def last_rows(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The top-k (ids, probs) [n+1, k] of the last verify at the committed positions, when
        recording (None otherwise)."""

    def start(self, prompt_ids: list[int], record_topk: int = 0) -> None:
        """Begin a generation after ``prompt_ids`` (the target's cache holds all but the last).
        ``record_topk`` > 0: each verify of this generation records ``last_rows`` (the top-k a
        training record needs)."""

    def verify(self, proposal: list[int], q: torch.Tensor | None) -> Verdict:
        """One forward over the pending token and ``proposal``; see decode/verify.py. An empty
        proposal is one plain decoding step (the target alone)."""


class LocalTarget:
    """In-process target: ``model`` (any runtime of the LM protocol) verified with ``sampling``
    in ``mode``. ``q``: [m, V] proposal distributions (rejection mode), else None."""

    def __init__(self, model: LM, sampling: SamplingConfig = SamplingConfig(), mode: str = "point-mass",
                 stream: str = "verify"):
        """``stream``: the name of this verifier's random stream (sampling.py), drawn afresh at
        each ``start`` so a seeded generation is reproducible on its own."""
        check_verify_mode(mode)
        self.model = model
        self.sampling = sampling
        self.mode = mode
        self.stream = stream
        self.gen: torch.Generator | None = None  # drawn at start: rejection's uniforms
        self.draws: PositionDraws | None = None  # drawn at start: point-mass's stream per position
        self.position = 0  # the sequence position of the next committed token
        self.pending: int | None = None
        self.ahead: torch.Tensor | None = None  # [1, V] the pending token's logits when it is cached
        self.record_topk = 0
        self.last_rows: tuple[torch.Tensor, torch.Tensor] | None = None

    def fork(self) -> "LocalTarget | None":
        """This target over its model's own fork (an eager model: a fresh cache over the same
        weights), for a generation of its own; None when the model cannot fork (a program holds
        one cache: decode/ownership.py then holds this target for one generation at a time)."""
        fork = getattr(self.model, "fork", None)
        return LocalTarget(fork(), self.sampling, self.mode, self.stream) if callable(fork) else None

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def max_length(self) -> int:
        return self.model.max_length

    @property
    def needs_q(self) -> bool:
        return not self.sampling.greedy and self.mode == "rejection"

    @property
    def eos_ids(self) -> set[int]:
        return model_eos_ids(self.model)

    def start(self, prompt_ids: list[int], record_topk: int = 0) -> None:
        """``record_topk`` > 0: after each verify, ``last_rows`` holds the target's top-k ids and
        probabilities ([n+1, k] each) at the committed positions, for training records."""
        self.gen = self.sampling.generator(self.stream)
        self.draws, self.position = PositionDraws(self.sampling, self.stream), len(prompt_ids)
        self.record_topk, self.last_rows = record_topk, None
        self.ahead = self.model.sync(prompt_ids).logits[-1:]  # the cached prefix kept
        self.pending = prompt_ids[-1]

    def room(self) -> int:
        """Proposal tokens the next verify fits in the window: the pending token is fed unless
        its logits came with the prefill. 0: only an empty proposal (one plain target step)."""
        return self.max_length - self.model.length - (self.ahead is None)

    def check(self, proposal: list[int], q: torch.Tensor | None) -> None:
        """Raise ValueError, before anything changes, if ``proposal`` / ``q`` cannot be verified."""
        if self.pending is None:
            raise RuntimeError("verify before start")
        m, vocab = len(proposal), self.vocab_size
        if any(not 0 <= t < vocab for t in proposal):
            raise ValueError(f"proposal ids must be in 0..{vocab - 1}")
        if m > self.room():
            raise ValueError(f"a {m}-token proposal would pass the context window of {self.max_length}")
        if self.needs_q and m and (q is None or tuple(q.shape) != (m, vocab)):
            raise ValueError(f"rejection mode needs q of shape [{m}, {vocab}]")

    def verify(self, proposal: list[int], q: torch.Tensor | None = None) -> Verdict:
        """One forward over [pending, proposal]; the cache ends holding the committed context
        (minus the new pending token). On any error the cache is as it was before the call."""
        self.check(proposal, q)
        length = self.model.length
        try:
            verdict = self._verify(proposal, q)
        except BaseException:
            self.model.truncate(length)
            raise
        self.pending, self.ahead = verdict.token, None
        self.position += verdict.accepted + 1
        return verdict

    def _verify(self, proposal: list[int], q: torch.Tensor | None) -> Verdict:
        if self.ahead is None:
            logits = self.model.extend([self.pending] + list(proposal)).logits  # [m+1, V]
        elif proposal:  # the pending token's row came with the prefill
            logits = torch.cat([self.ahead, self.model.extend(list(proposal)).logits])
        else:
            logits = self.ahead
        if self.sampling.greedy:
            verdict = verify_greedy(proposal, logits.argmax(-1).tolist())
        else:
            p = LazyProbs(logits, self.sampling)  # [m+1, V], rows computed when read
            if self.mode == "rejection" and proposal:
                verdict = verify_rejection(proposal, q, p, self.gen)
            else:
                verdict = verify_point_mass(proposal, p, lambda i: self.draws.at(self.position + i))
        if self.record_topk:
            self.last_rows = topk_rows(logits[: verdict.accepted + 1], self.record_topk)
        self.model.rollback(len(proposal) - verdict.accepted)
        return verdict
