"""The pair behind the server: one ``Session`` (loaded in the background while ``/health`` says
503), its generations run one at a time, first come first served, each in a thread of its own
that hands its pieces to the event loop; requests beyond the bounded queue are refused with 429
and a ``Retry-After`` from the time generations take.

A generation whose client goes away is told to stop: its thread closes the Session's stream
before the next round (the caches stay consistent, the next request is exact) and the turn
passes on only once it has stopped. Knows threads, asyncio and the Session's stream; nothing
about HTTP.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable

import anyio

from omnidraft.decode.generate import Piece, Result
from omnidraft.errors import ContextFull, OmniDraftError
from omnidraft.memory.spaces import LOCAL
from omnidraft.sampling import SamplingConfig
from omnidraft.serve.errors import ApiError
from omnidraft.serve.requests import Ask


@dataclass
class Counters:
    """What /metrics reports: totals since the server started."""

    requests: dict[str, int] = field(default_factory=dict)  # finish reason (or "cancelled") -> count
    rejected: int = 0  # 429: the queue was full
    prompt_tokens: int = 0
    prompt_cached: int = 0
    prompt_restored_ram: int = 0  # prompt tokens whose caches a saved conversation state gave back
    prompt_restored_disk: int = 0
    generation_tokens: int = 0
    target_forwards: int = 0
    drafts: int = 0  # rounds that verified a draft
    draft_tokens: int = 0
    accepted: int = 0
    copies: int = 0  # rounds that verified a copy from the context
    copy_tokens: int = 0
    copied: int = 0
    recalls: int = 0  # rounds that verified a continuation recalled from the memory
    recall_tokens: int = 0
    recalled: int = 0
    seconds: float = 0.0  # generation time, summed

    def add(self, result: Result, seconds: float) -> None:
        m = result.metrics
        self.requests[result.finish_reason] = self.requests.get(result.finish_reason, 0) + 1
        self.prompt_tokens += m.get("prompt_tokens", 0)
        self.prompt_cached += m.get("prompt_cached", 0)
        if m.get("restored_from") == "ram":
            self.prompt_restored_ram += m.get("prompt_restored", 0)
        elif m.get("restored_from") == "disk":
            self.prompt_restored_disk += m.get("prompt_restored", 0)
        self.generation_tokens += len(result.token_ids)
        self.target_forwards += m.get("target_forwards", 0)
        kinds = m.get("rounds_by_kind", {})
        d, c, r = kinds.get("drafter", {}), kinds.get("lookup", {}), kinds.get("memory", {})
        self.drafts += d.get("rounds", 0)
        self.draft_tokens += d.get("proposed", 0)
        self.accepted += d.get("accepted", 0)
        self.copies += c.get("rounds", 0)
        self.copy_tokens += c.get("proposed", 0)
        self.copied += c.get("accepted", 0)
        self.recalls += r.get("rounds", 0)
        self.recall_tokens += r.get("proposed", 0)
        self.recalled += r.get("accepted", 0)
        self.seconds += seconds


class Runner:
    """``load()`` builds the Session (in a thread, at ``start``) after ``prepare(say)`` (a first
    start's pairing: each line it says is the ``stage`` /health shows, and goes to ``note``); at
    most ``queue`` requests wait behind the one generating."""

    def __init__(self, load: Callable[[], object], queue: int,
                 prepare: Callable[[Callable[..., None]], object] | None = None,
                 note: Callable[[str], None] = lambda line: None):
        self.load, self.queue, self.prepare, self.note = load, queue, prepare, note
        self.session = None
        self.failed: str | None = None  # why the Session could not load
        self.stage: str | None = None  # what the load is doing, where it says (a first start's pairing)
        self.waiting = 0
        self.running = 0
        self.counters = Counters()
        self._turn: asyncio.Lock | None = None
        self.on_ready: Callable[[], None] = lambda: None

    def start(self) -> None:
        self._turn = asyncio.Lock()  # FIFO: requests generate in the order they arrived
        threading.Thread(target=self._load, name="omnidraft-load", daemon=True).start()

    def say(self, *parts, end: str = "\n") -> None:
        """A progress line of the load (``end`` "": a status line rewritten in place: the stage,
        not logged)."""
        line = " ".join(str(p) for p in parts).strip()
        if line:
            self.stage = line
            if end:
                self.note(line)

    def _load(self) -> None:
        try:
            if self.prepare is not None:
                self.prepare(self.say)
                self.stage = "loading the pair"
            self.session = self.load()
        except OmniDraftError as err:
            self.failed = str(err)
        except Exception as err:  # noqa: BLE001  (reported on /health and by `omnidraft serve`, which exits)
            self.failed = f"{type(err).__name__}: {err}"
        self.on_ready()

    def retry_after(self) -> int:
        """Seconds until a place in the queue is likely free: the mean generation's time."""
        done = sum(self.counters.requests.values())
        mean = self.counters.seconds / done if done else 5.0
        return max(1, min(60, math.ceil(mean)))

    async def generate(self, ask: Ask, sampling: SamplingConfig | None,
                       space: str = LOCAL) -> AsyncIterator[Piece | Result]:
        """The pieces of ``ask``'s answer, then its Result, recalling from and remembered in the
        memory's ``space``. Closed early (the client left), the generation stops within a round and
        the next request waits until it has."""
        session = self.session
        if session is None:
            raise ApiError(503, self.failed or "the server is still loading the models", code="loading",
                           retry_after=None if self.failed else 5)
        if self.waiting >= self.queue + (1 - self.running):
            self.counters.rejected += 1
            raise ApiError(429, f"the server is busy: {self.waiting} requests are waiting", code="queue_full",
                           retry_after=self.retry_after())
        self.waiting += 1
        waiting = True
        try:
            async with self._turn:
                self.waiting, waiting, self.running = self.waiting - 1, False, 1
                try:
                    async for event in self._run(session, ask, sampling, space):
                        yield event
                finally:
                    self.running = 0
        finally:
            if waiting:  # left the queue before its turn
                self.waiting -= 1

    async def _run(self, session, ask: Ask, sampling: SamplingConfig | None,
                   space: str) -> AsyncIterator[Piece | Result]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        stop = threading.Event()
        put = lambda kind, value: loop.call_soon_threadsafe(events.put_nowait, (kind, value))  # noqa: E731

        def work() -> None:
            t0 = time.perf_counter()
            pieces = session.pieces(ask.messages if ask.messages is not None else ask.prompt,
                                    max_new_tokens=ask.max_tokens, stop=ask.stop, sampling=sampling, strict=True,
                                    memory_space=space)
            try:
                while not stop.is_set():
                    try:
                        piece = next(pieces)
                    except StopIteration as done:
                        self.counters.add(done.value, time.perf_counter() - t0)
                        return put("done", done.value)
                    put("piece", piece)
                self.counters.requests["cancelled"] = self.counters.requests.get("cancelled", 0) + 1
            except OmniDraftError as err:  # the request's own fault (its prompt past the window, ...)
                put("error", err)
            except BaseException as err:  # noqa: BLE001  (a server fault: the handler answers 500)
                put("crash", err)
            finally:
                pieces.close()  # ends the generation between rounds: caches consistent
                put("end", None)

        thread = threading.Thread(target=work, name="omnidraft-generation", daemon=True)
        thread.start()
        try:
            while True:
                kind, value = await events.get()
                if kind == "piece":
                    yield value
                elif kind == "done":
                    yield value
                    return
                elif kind == "error":
                    full = isinstance(value, ContextFull)
                    raise ApiError(400, str(value), param="messages" if full and ask.messages else
                                   "prompt" if full else None,
                                   code="context_length_exceeded" if full else "invalid_request")
                elif kind == "crash":
                    raise value
                else:
                    return
        finally:
            stop.set()
            with anyio.CancelScope(shield=True):  # also when the client's leaving cancelled this task
                await anyio.to_thread.run_sync(thread.join)  # the turn passes on once the generation has stopped
