"""The running requests of an engine that verifies for us (vLLM), each with its own proposing
state: one ``Speculator`` (decode/speculator.py) per request, driven across the engine's steps.

Each step the engine hands every running request's ids so far and the ids its last step
committed (the accepted part of what was proposed, then the correction or bonus token); a stream
takes the verdict in, as decode/loop.py does after its own verify (the draft length's counts,
reverse translation, the n-gram cache), and plans the next proposal. The engine does not say
which request is which, only each request's ids, so a request is recognised by them: a stream
whose ids are the row's ids before this step's. The time between two steps is the engine's
verify of the widest proposal, which the cost model learns v(n) from (``StepTimes``). A request
ends when the engine no longer holds it (where it says which it holds), else when it has been
missing from the batch for FORGET_AFTER steps; ``end`` is then told (the pair's memory keeps its
answer there).

Knows the Speculator, the draft length and the cost model's verify prices; nothing about vLLM's
types (omnidraft/vllm/proposer.py adapts its call) or the models.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Collection, Sequence

from omnidraft.decode.draft_length import DraftLength
from omnidraft.decode.speculator import Plan, Speculator

CHECK = 16  # ids compared (the last before this step's) to recognise a request's row
FORGET_AFTER = 8  # steps a stream may be missing from the batch (preempted, say) before it is dropped
STEP_WEIGHT = 0.2  # a step's weight in the running estimate of its width's verify time
PRIOR_SLOPE = 0.03  # before a width is timed: each extra verified id costs this share of v(1)
SOURCES = {"drafter": "drafter", "lookup": "context", "memory": "memory"}  # a round's kind -> who proposed


@dataclass
class Stream:
    spec: Speculator
    prompt: int = 0  # the request's prompt ids (its ids before the first step's)
    key: object = None  # the engine's name for the request (None: not said)
    plan: Plan | None = None  # proposed at the last step, awaiting its verdict
    started: float = 0.0  # when that plan was made
    missing: int = 0  # steps since the request was last in the batch
    tally: dict[str, list[int]] = field(default_factory=dict)  # who proposed -> [rounds, proposed, accepted]


class StepTimes:
    """The engine's ms per step by verify width (``verify_ms``, a cost model's own dict, updated in
    place): a timed width by its running estimate; one never timed by a prior shape (1 + PRIOR_SLOPE
    per extra id) scaled by what the timed widths measured against it."""

    def __init__(self, verify_ms: dict[int, float]):
        self.verify_ms = verify_ms
        self.timed: set[int] = set()
        self.scale = verify_ms.get(1, 50.0)

    @staticmethod
    def shape(width: int) -> float:
        return 1.0 + PRIOR_SLOPE * (width - 1)

    def observe(self, width: int, ms: float) -> None:
        if width not in self.verify_ms or ms <= 0:
            return
        old = self.verify_ms[width] if width in self.timed else ms
        self.verify_ms[width] = (1 - STEP_WEIGHT) * old + STEP_WEIGHT * ms
        self.timed.add(width)
        self.scale = (1 - STEP_WEIGHT) * self.scale + STEP_WEIGHT * ms / self.shape(width)
        for w in self.verify_ms:
            if w not in self.timed:
                self.verify_ms[w] = self.scale * self.shape(w)


class Streams:
    """``open(ids)``: a Speculator for a new request whose ids so far are ``ids``; ``k``: the
    draft length every request's rounds share (its acceptance evidence pooled); ``times``: the
    engine's verify prices; ``k_max``: the most ids the engine verifies a step (its
    num_speculative_tokens); ``max_len``: the engine's context window; ``end``: told of each
    request that ended (None: nobody)."""

    def __init__(self, open: Callable[[list[int]], Speculator], k: DraftLength, times: StepTimes, *,
                 k_max: int, max_len: int, end: Callable[[Stream], None] | None = None):
        self.open, self.k, self.times, self.end = open, k, times, end
        self.k_max, self.max_len = k_max, max_len
        self.streams: list[Stream] = []
        self.last_end: float | None = None  # when the previous step's proposals were handed over
        self.last_width = 0  # the widest verify they asked for
        self.last_rows = 0  # how many rows that step had
        self.opened = 0  # requests seen
        self.rounds = {"lookup": 0, "memory": 0, "drafter": 0, "none": 0}  # rounds proposed, by kind
        self.ended = 0  # requests that ended
        self.propose_s = 0.0  # time spent in step(): the engine waits for it

    def step(self, rows: Sequence[tuple[Sequence[int], Sequence[int], int | None]], keys: Sequence | None = None,
             held: Collection | None = None) -> list[list[int]]:
        """``rows``: per running request, (the ids its last step committed, every id it has now,
        how many more it may generate: None when unknown); a row with none committed (its prompt
        still being read) gets no proposal. ``keys``: each row's request as the engine names it,
        ``held``: the names of every request the engine still holds (None: not said). Returns each
        row's proposal: at most ``k_max`` target ids."""
        now = time.perf_counter()
        seen: set[int] = set()
        out: list[list[int]] = []
        verified = 0  # rows whose last step verified this proposer's plan
        for i, (new, ids, left) in enumerate(rows):
            if not len(new):
                out.append([])
                continue
            stream = self._find(ids, len(new), seen)
            stream.key = stream.key if keys is None else keys[i]
            if stream.plan is not None:
                self._take_verdict(stream, [int(t) for t in new], now)
                verified += 1
            out.append(self._propose(stream, len(ids), left))
            seen.add(id(stream))
        if verified == len(rows) == self.last_rows and self.last_end is not None:
            # a step that only verified the last step's proposals (no prompt read, no idle gap): its time
            self.times.observe(self.last_width, (now - self.last_end) * 1e3)
        self.last_rows = len(rows)
        for s in self.streams:
            s.missing = 0 if id(s) in seen else s.missing + 1
        live = [s for s in self.streams if s.missing <= FORGET_AFTER
                and (s.missing == 0 or held is None or s.key is None or s.key in held)]
        for s in self.streams:
            if s not in live:
                self._end(s)
        self.streams = live
        self.last_width = max((len(p) + 1 for p in out), default=0) if seen else 0
        self.last_end = time.perf_counter()
        self.propose_s += self.last_end - now
        return out

    def state(self) -> dict:
        """What the proposer has done and what its cost model reads now."""
        state = getattr(self.k, "state", lambda: {})()
        return {"requests": self.opened, "ended": self.ended, "rounds": dict(self.rounds),
                "propose_s": round(self.propose_s, 3),
                "verify_ms": {w: round(ms, 2) for w, ms in sorted(self.times.verify_ms.items())},
                "timed_widths": sorted(self.times.timed), "cost_model": state}

    def _find(self, ids: Sequence[int], fresh: int, taken: set[int]) -> Stream:
        """The stream whose ids are ``ids`` before the last ``fresh``, else a new one over all of ``ids``."""
        before = len(ids) - fresh
        tail = [int(t) for t in ids[max(0, before - CHECK):before]]
        for s in self.streams:
            committed = s.spec.committed
            if id(s) not in taken and len(committed) == before and committed[-CHECK:] == tail \
                    and committed[:CHECK] == [int(t) for t in ids[:min(CHECK, before)]]:
                return s
        stream = Stream(self.open([int(t) for t in ids]), prompt=before)
        self.k.start()
        self.streams.append(stream)
        self.opened += 1
        return stream

    def _end(self, stream: Stream) -> None:
        self.ended += 1
        if self.end is not None:
            self.end(stream)

    def _take_verdict(self, stream: Stream, new: list[int], now: float) -> None:
        """What the engine committed after the stream's last proposal: its kept prefix, then the
        correction or bonus token (decode/loop.py's steps 4 and 5, the engine having verified)."""
        plan = stream.plan
        proposed = plan.proposal.target_ids
        accepted = 0
        while accepted < min(len(proposed), len(new) - 1) and new[accepted] == proposed[accepted]:
            accepted += 1
        stream.spec.verdict(plan, accepted, new[accepted])
        stream.spec.commit(plan, new)
        if plan.kind in SOURCES:
            rounds, n, a = stream.tally.get(SOURCES[plan.kind], (0, 0, 0))
            stream.tally[SOURCES[plan.kind]] = [rounds + 1, n + len(proposed), a + accepted]
        self.k.observe_round(plan.width, plan.proposal.drafter_forwards, plan.read, now - stream.started)
        stream.plan = None

    def _propose(self, stream: Stream, length: int, left: int | None) -> list[int]:
        """The stream's next proposal: what fits the window and the request's budget beyond its
        next token (the cost model weighs the drafter's catch-up against what is ``left``)."""
        left = self.max_len - length if left is None else min(left, self.max_len - length)
        room = max(0, min(self.k_max, left - 1))
        stream.started = time.perf_counter()
        stream.plan = stream.spec.plan(room, left)
        self.rounds[stream.plan.kind] += 1
        return list(stream.plan.proposal.target_ids)
