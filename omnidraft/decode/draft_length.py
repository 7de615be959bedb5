"""How many tokens the next round drafts: a fixed k, or the cost model's choice, re-estimated
online from the acceptance the rounds observe.

``CostModelK`` keeps per-position acceptance counts (position i: rounds that proposed it with
0..i-1 accepted, and of those the rounds that accepted it), seeded from what pairing measured and
updated after every round with old evidence fading (counts halve once position 0 has seen
``memory`` rounds), and asks the cost model (pairs/cost.py) for the k that maximises expected
tokens per second; k = 0 means the target decodes alone. While k is 0 nothing is observed, so
the next generation after ``probe_soon()`` (a new adapter was published, say) and every
``probe_every``-th generation start with ``probe_rounds`` rounds at the best positive k (a
probe costs about one generation in eight its speed in ten) and then decide again. A drafting
round first pays the drafter's catch-up (reading the prompt, or what copies committed since it
last drafted): ``next_k`` drafts only where the rounds without a copy still to come are expected to
save more than that costs. Every round's wall time teaches the model what rounds cost beyond its
call-by-call timings (pairs/cost.py ``observe_round``), so k follows what rounds really cost here.

A round may instead verify ids copied from the context (propose/lookup.py) or recalled from the
pair's memory of earlier answers (memory/): no drafter forward. ``lookup_span`` says how many of
a found continuation to verify, or 0 to draft as usual: the cost model compares the copy's
expected tokens per second, from the acceptance per position that earlier rounds of the same
source after a match of the same length saw (a hopeful prior before any), with what drafting (or
the target alone) is predicted to give; ``copy_rate`` compares a context copy with a recall.

Knows the cost model's interface; nothing about models, strategies or timing.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence

from omnidraft.errors import OmniDraftError

K_MAX = 8  # the longest draft: what a fixed k may ask and what the cost model chooses among
REMOTE_K = 4  # a remote target's draft length (its verify cost is the server's and the network's: #21)


class DraftLength(Protocol):
    def start(self) -> None:
        """A generation begins."""

    def next_k(self, unread: int = 0, remaining: int | None = None) -> int:
        """Drafter tokens for the next round (0: the target decodes one token alone). ``unread``:
        tokens the drafter must first read (its catch-up); ``remaining``: tokens the generation
        may still commit (None: unknown)."""

    def observe(self, proposed: int, accepted: int) -> None:
        """A round proposed ``proposed`` target tokens and the target accepted ``accepted``."""

    def probe_soon(self) -> None:
        """The drafter changed (a new adapter): look at its acceptance again soon."""

    def observe_round(self, width: int, forwards: int, read: int, seconds: float) -> None:
        """A round took ``seconds``: a ``width``-token verify call after ``forwards`` drafter
        forwards (0: none) that first read ``read`` committed tokens."""

    def lookup_span(self, match: int, available: int, source: str = "context", *,
                    steps: Sequence[float] | None = None, here: tuple[float, float] | None = None) -> int:
        """Ids to verify this round from a continuation of ``available`` ids copied from
        ``source`` (``context``, ``memory``, ``memory-unsure``: priced apart) after a ``match``-id
        suffix; 0: draft (or decode alone) instead. ``steps``: a recall's per-id chance steps
        (memory/index.py ``Recall.steps``; None: a copy of one occurrence); ``here``: this sequence's
        recalls so far (verified, first id accepted)."""

    def copy_rate(self, match: int, n: int, source: str = "context", *, steps: Sequence[float] | None = None,
                  here: tuple[float, float] | None = None) -> float:
        """What verifying ``n`` such ids is predicted to give (comparable between sources)."""

    def observe_lookup(self, match: int, proposed: int, accepted: int, next_kept: bool | None = None,
                       source: str = "context", *, steps: Sequence[float] | None = None) -> None:
        """A copy from ``source`` after a ``match``-id suffix proposed ``proposed`` ids, ``accepted``
        kept. ``next_kept``: all were kept and the copy went on; whether the target's bonus token is
        the copy's next id (None otherwise)."""


@dataclass
class FixedK:
    """``k`` drafter tokens every round; a lookup round verifies up to ``k`` copied ids (k = 0:
    the target alone, no lookup either)."""

    k: int

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 0 <= self.k <= K_MAX:
            raise OmniDraftError(f"draft length k must be an integer in 0..{K_MAX}, got {self.k!r}",
                                 "0 runs the target alone; leave k unset for the cost model's choice")

    def start(self) -> None:
        pass

    def probe_soon(self) -> None:
        pass

    def next_k(self, unread: int = 0, remaining: int | None = None) -> int:
        return self.k

    def observe(self, proposed: int, accepted: int) -> None:
        pass

    def observe_round(self, width: int, forwards: int, read: int, seconds: float) -> None:
        pass

    def lookup_span(self, match: int, available: int, source: str = "context", *,
                    steps: Sequence[float] | None = None, here: tuple[float, float] | None = None) -> int:
        return min(available, self.k)

    def copy_rate(self, match: int, n: int, source: str = "context", *, steps: Sequence[float] | None = None,
                  here: tuple[float, float] | None = None) -> float:
        return float(n)  # the longer copy (a tie: the context's)

    def observe_lookup(self, match: int, proposed: int, accepted: int, next_kept: bool | None = None,
                       source: str = "context", *, steps: Sequence[float] | None = None) -> None:
        pass


LOOKUP_PRIOR = (0.6, 2.0)  # (rate, weight): a copy after an unseen match length is tried hopefully
# A recall's ids past its first, priced by its chance's step there (memory/index.py Recall.steps): where the
# earlier occurrences all went on alike ("agree"), split but mostly one way ("split"), split wide ("wide"), or
# where one occurrence was followed ("one": nothing agreed). (rate, weight) priors; measured on the 1.5B pair's
# held-out recurring work: agree 0.93, split 0.38, wide 0.08 (docs/memory.md).
STEP_PRIORS = {"agree": (0.9, 4.0), "split": (0.4, 4.0), "wide": (0.1, 4.0), "one": (0.6, 4.0)}
HERE_WEIGHT = 4.0  # rounds' weight of the pooled first-id rate against one sequence's own recalls (``here``)
SHARE_PRIOR = 16.0  # tokens' weight of the prior that every token is drafted (drafted_share)


def bucket(match: int) -> int:
    """The match lengths whose copies are counted together: each up to 8, then 12 (9-15), 16 (16+)."""
    return match if match <= 8 else 12 if match < 16 else 16


def step_class(step: float) -> str:
    """STEP_PRIORS' class of a recall's chance step at one id."""
    return "one" if step < 0 else "agree" if step >= 0.999 else "split" if step >= 0.5 else "wide"


class CostModelK:
    """The cost model's k from running per-position acceptance. ``reached`` / ``accepted``:
    counts from pairing (empty: nothing known yet, so the first generation probes)."""

    def __init__(self, model, reached: list[float] | None = None, accepted: list[float] | None = None, *,
                 k_max: int = K_MAX, memory: int = 256, probe_every: int = 32, probe_rounds: int = 6):
        if not 1 <= k_max <= K_MAX:
            raise ValueError(f"k_max must be in 1..{K_MAX}, got {k_max}")
        self.model = model
        self.k_max = k_max
        self.memory = memory
        self.probe_every = probe_every
        self.probe_rounds = probe_rounds
        self.reached = [float(x) for x in (reached or [])]
        self.accepted = [float(x) for x in (accepted or [])]
        self.since_probe = probe_every if not self.reached else 0  # generations since the last probe
        self.probe_left = 0
        self.pinned: int | None = None  # fixed(): a draft length pairing measures acceptance with
        self.k = 0
        # copies by (source, match length's bucket): per position, rounds that reached it and that accepted it
        self.copy_counts: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
        # a recall's ids past its first, by (source, step class): [rounds that reached one, that accepted it]
        self.step_counts: dict[tuple[str, str], list[float]] = {}
        self.tokens = (0.0, 0.0)  # committed tokens: (by copies, all)
        self.reestimate()

    # ------------------------------------------------------------------ the estimate
    def rates(self) -> list[float]:
        """Acceptance per proposal position (positions never reached: none)."""
        return [a / n for a, n in zip(self.accepted, self.reached) if n > 0]

    def reestimate(self) -> None:
        """Choose k again from the counts (after the model's costs changed, say). Drafting starts
        only with the model's margin over the target alone (estimates err: pairs/cost.py MARGIN)
        and, once on, stays while predicted at least as fast: one unlucky round on a marginal win
        does not turn it off until the next probe."""
        rates = self.rates()
        if not rates:
            self.k, self.predicted = 0, self.model.tokens_per_s([], 0)
        else:
            on = {} if self.k == 0 else {"margin": 1.0}
            self.k, self.predicted = self.model.choose(rates, self.k_max, **on)

    def best_positive(self) -> int:
        """The k >= 1 the model likes best (the probe's length); k_max // 2 with no evidence."""
        rates = self.rates()
        if not rates:
            return max(1, self.k_max // 2)
        return max(range(1, self.k_max + 1), key=lambda k: self.model.tokens_per_s(rates, k))

    # ------------------------------------------------------------------ DraftLength
    def start(self) -> None:
        self.since_probe += 1
        if self.k == 0 and self.since_probe >= self.probe_every:
            self.probe_left, self.since_probe = self.probe_rounds, 0

    def probe_soon(self) -> None:
        """Probe at the next generation (when k is 0): the drafter or its adapter changed."""
        self.since_probe = self.probe_every

    def next_k(self, unread: int = 0, remaining: int | None = None) -> int:
        """The chosen k, unless keeping the drafter reading costs more than drafting is expected
        to save in what remains. It reads the ``unread`` tokens now and, to draft again after each
        copy, every copied id to come (the share 1 - ``drafted_share`` of ``remaining``), at the
        model's catch-up ms; it saves, per token the rounds without a copy commit (the rest of
        ``remaining``), the ms drafting saves over the target alone. Then 0: the target decodes
        this round alone (the reading waits; a generation that copies most of its text never pays
        for its prompt's, nor drafts between copies it must read)."""
        if self.pinned is not None:
            return self.pinned
        if self.probe_left:
            return self.best_positive()
        if self.k and remaining is not None:
            share = self.drafted_share()
            saves = 1e3 / self.model.tokens_per_s([], 0) - 1e3 / self.model.tokens_per_s(self.rates(), self.k)
            if (unread + (1 - share) * remaining) * self.model.catchup_ms > saves * share * remaining:
                return 0
        return self.k

    def drafted_share(self) -> float:
        """The share of committed tokens that rounds without a copy committed (faded like the
        acceptance counts; no evidence: 1, every token drafted)."""
        copied, total = self.tokens
        return (total - copied + SHARE_PRIOR) / (total + SHARE_PRIOR)

    def _count_tokens(self, committed: int, copied: bool) -> None:
        copied_n, total = self.tokens
        copied_n, total = copied_n + copied * committed, total + committed
        if total > 4 * self.memory:
            copied_n, total = copied_n / 2, total / 2
        self.tokens = (copied_n, total)

    @contextmanager
    def fixed(self, k: int) -> Iterator["CostModelK"]:
        """Draft exactly ``k`` per round inside the block, still counting acceptance (pairing
        measures acceptance this way before the model chooses)."""
        self.pinned = k
        try:
            yield self
        finally:
            self.pinned = None
            self.probe_left, self.since_probe = 0, 0  # just measured: no probe needed yet

    def observe(self, proposed: int, accepted: int) -> None:
        self._count_tokens(accepted + 1, copied=False)
        if proposed == 0:
            return
        for i in range(min(proposed, accepted + 1)):
            if i == len(self.reached):
                self.reached.append(0.0)
                self.accepted.append(0.0)
            self.reached[i] += 1
            self.accepted[i] += i < accepted
        if self.reached[0] > self.memory:  # old evidence fades: the adapter and the prompts change
            self.reached = [n / 2 for n in self.reached]
            self.accepted = [a / 2 for a in self.accepted]
        self.probe_left = max(0, self.probe_left - 1)
        self.reestimate()

    def observe_round(self, width: int, forwards: int, read: int, seconds: float) -> None:
        """The round's wall time teaches the model what rounds cost beyond its timed terms
        (pairs/cost.py ``observe_round``); k is chosen again on that."""
        self.model.observe_round(width, forwards, read, seconds)
        self.reestimate()

    def lookup_rates(self, match: int, source: str = "context", *, steps: Sequence[float] | None = None,
                     here: tuple[float, float] | None = None) -> list[float]:
        """Acceptance per position of copies from ``source`` after a ``match``-id suffix, each pulled
        by LOOKUP_PRIOR's weight toward the position before it (the first toward the prior's rate):
        a copy accepted whole so far is likely accepted on, so a position seldom reached is not
        judged by the prior's pessimism (no evidence at all: the prior alone). With a recall's
        ``steps``, its first id so and every later one by its step's class (``step_rate``); ``here``:
        this sequence's own recalls so far (verified, first id accepted), which pull the first id's
        rate toward theirs (work the memory knows, or not, shows in a few rounds)."""
        prior, weight = LOOKUP_PRIOR
        reached, accepted = self.copy_counts.get((source, bucket(match)), ([], []))
        rates = []
        for a, n in zip(accepted, reached):
            prior = (a + prior * weight) / (n + weight)
            rates.append(prior)
        rates = rates or [prior]
        if steps is None:
            return rates
        first = rates[0] if here is None else (here[1] + rates[0] * HERE_WEIGHT) / (here[0] + HERE_WEIGHT)
        return [first] + [self.step_rate(source, step_class(s)) for s in steps[1:]]

    def step_rate(self, source: str, cls: str) -> float:
        """Acceptance of a recall's id past its first whose step is of class ``cls`` (STEP_PRIORS),
        the ids before it accepted."""
        prior, weight = STEP_PRIORS[cls]
        n, a = self.step_counts.get((source, cls), (0.0, 0.0))
        return (a + prior * weight) / (n + weight)

    def _best_copy(self, match: int, available: int, source: str, steps: Sequence[float] | None,
                   here: tuple[float, float] | None) -> tuple[int, float]:
        """The most paying copy length of at most ``available`` and its tokens/s (0, 0.0: none measured)."""
        lengths = self.model.copy_lengths(available)
        if not lengths:
            return 0, 0.0
        rates = self.lookup_rates(match, source, steps=steps, here=here)
        best = max(lengths, key=lambda n: self.model.copied_tokens_per_s(rates, n))
        return best, self.model.copied_tokens_per_s(rates, best)

    def lookup_span(self, match: int, available: int, source: str = "context", *,
                    steps: Sequence[float] | None = None, here: tuple[float, float] | None = None) -> int:
        if self.pinned is not None:  # pairing measures the drafter
            return 0
        best, rate = self._best_copy(match, available, source, steps, here)
        drafting = self.model.tokens_per_s(self.rates(), self.next_k())
        return best if rate > drafting else 0

    def copy_rate(self, match: int, n: int, source: str = "context", *, steps: Sequence[float] | None = None,
                  here: tuple[float, float] | None = None) -> float:
        return self.model.copied_tokens_per_s(self.lookup_rates(match, source, steps=steps, here=here), n)

    def observe_lookup(self, match: int, proposed: int, accepted: int, next_kept: bool | None = None,
                       source: str = "context", *, steps: Sequence[float] | None = None) -> None:
        """``next_kept`` counts as one more position observed: the bonus token is the target's
        verdict on the copy's next id (greedy: its argmax; sampling: a draw from p, which is that
        id with probability p(id), the point-mass rule's chance of accepting it). So a copy verified
        short learns whether a longer one would have been kept, at no cost. A recall's ``steps``
        count its ids past the first by their steps' classes instead of by position."""
        self._count_tokens(accepted + 1, copied=True)
        if next_kept is not None:
            proposed, accepted = proposed + 1, accepted + next_kept
        key = (source, bucket(match))
        reached, acc = self.copy_counts.setdefault(key, ([], []))
        seen = min(proposed, accepted + 1)
        for i in range(seen if steps is None else min(seen, 1)):
            if i == len(reached):
                reached.append(0.0)
                acc.append(0.0)
            reached[i] += 1
            acc[i] += i < accepted
        if reached and reached[0] > self.memory:
            self.copy_counts[key] = ([n / 2 for n in reached], [a / 2 for a in acc])
        for i in range(1, seen if steps is not None else 0):
            counts = self.step_counts.setdefault((source, step_class(steps[i])), [0.0, 0.0])
            counts[0] += 1
            counts[1] += i < accepted
            if counts[0] > 4 * self.memory:
                counts[:] = [counts[0] / 2, counts[1] / 2]

    def reaching(self) -> "Reaching":
        """This model with each drafting round allowed ``k_max`` drafts (a stopping rule ends them)."""
        return Reaching(self)

    def state(self) -> dict:
        """What the model currently reads: its k, predicted tokens/s and acceptance per position."""
        best = self.best_positive()
        return {"k": self.k, "predicted_tokens_per_s": round(self.predicted, 3),
                "target_alone_tokens_per_s": round(self.model.tokens_per_s([], 0), 3), "best_k": best,
                "best_k_tokens_per_s": round(self.model.tokens_per_s(self.rates(), best), 3),
                "position_acceptance": [round(r, 4) for r in self.rates()], "probing": bool(self.probe_left),
                "drafted_share": round(self.drafted_share(), 3),
                "drafted_extra_ms": round(self.model.drafted_extra_ms, 2), "pace": round(self.model.pace, 3),
                **{f"{name}_acceptance": {m: [round(r, 4) for r in self.lookup_rates(m, source)]
                                          for src, m in sorted(self.copy_counts) if src == source}
                   for name, source in (("lookup", "context"), ("memory", "memory"),
                                        ("memory_unsure", "memory-unsure"))},
                "memory_step_acceptance": {f"{src}:{cls}": round(self.step_rate(src, cls), 4)
                                           for src, cls in sorted(self.step_counts)}}


class Reaching:
    """A CostModelK whose drafting rounds ask for its ``k_max`` drafts: the model still decides
    whether a round drafts at all (0: the target alone, or a copy) and learns from every round;
    the proposer's stopping rule (the acceptance head against the model's prices,
    ``CostModel.stop_below``) decides where each draft ends. Everything else is the model's."""

    def __init__(self, model: CostModelK):
        self.inner = model

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def next_k(self, unread: int = 0, remaining: int | None = None) -> int:
        k = self.inner.next_k(unread, remaining)
        return self.inner.k_max if k and self.inner.pinned is None else k
