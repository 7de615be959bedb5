"""Which route a Session's next generation runs on, and what it teaches afterwards. A Session
holds one Router and runs each generation on the one Route it hands out (pairs/routing.py):

- the target's runtime the pair loaded, alone, when nothing else was timed here;
- with `auto` and both runtimes timed by `omnidraft pair`, the one predicted to end the generation
  first (pairs/routing.py ``choose``), whose prompt read and decoding then refine its prices; after
  PROBE_EVERY generations of a kind of work in a row on one route, the next runs on the other once
  (a route's price for a kind is learnt only from its own generations of it: one priced high by a
  few unlucky ones, say on a busy machine, would otherwise never run that kind again);
- with an OpenAI-API target, the engine generating alone while it is measured faster than the
  pair verifying through it (pairs/engine_choice.py; not with stop strings, which the pair applies).

After each generation, closed early or not, the route's cost model is kept once (pairs/cost_store.py).

Knows routes, cost models and the engine's figures; nothing about decoding, tokenizers or the Session.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Iterator

from omnidraft.decode.draft_length import CostModelK
from omnidraft.decode.target import LocalTarget
from omnidraft.errors import OmniDraftError
from omnidraft.pairs.engine_choice import EngineChoice
from omnidraft.pairs.cost import DECODE_MIN_TOKENS
from omnidraft.pairs.routing import Route, choose, forecast, kind, observe
from omnidraft.sampling import SamplingConfig

# generations of one kind in a row on one route before the other runs one: a route priced wrong for a
# kind is retried (its price moves by the kind's learning weight each time) at a cost of at most one
# generation in this many at the slower speed where the price was right
PROBE_EVERY = 16


@dataclass(frozen=True)
class Pick:
    """The route a generation runs on, the kind of work it was judged (pairs/routing.py ``kind``)
    and, where it was routed, each runtime's predicted ms and the chosen route's forecast."""

    route: Route
    work: str
    predicted_ms: dict[str, float] | None = None
    forecast: dict[str, float] | None = None


class Router:
    """``routes``: the local runtimes (the bit-exact program first: ties go to it), or the one
    target; ``choice``: an OpenAI-API target's figures for handing generations to the engine."""

    def __init__(self, routes: list[Route], choice: EngineChoice | None = None):
        self.routes = routes
        self.route = routes[0]  # the route the latest generation ran on (or the next, before any)
        self.choice = choice
        self.engine = routes[0].target if choice is not None else None  # the serving engine
        self._engine = replace(routes[0], alone=True)
        self._streak: dict[str, tuple[str, int]] = {}  # kind of work -> (the route it ran on, times in a row)

    @property
    def routed(self) -> bool:
        return len(self.routes) > 1

    def pick(self, prompt_ids: list[int], max_new_tokens: int | None, preamble: list[int], chat: bool,
             stops: bool) -> Pick:
        """The route for a prompt (``preamble``: the chat template's opening ids) asking for
        ``max_new_tokens`` (None: to the window's end); ``stops``: it has stop strings."""
        work = kind(prompt_ids, preamble, chat)
        if self.routed:  # before the budget: the runtimes' windows differ
            asked = max_new_tokens or max(r.target.max_length for r in self.routes) - len(prompt_ids)
            route, predicted = choose(self.routes, prompt_ids, asked, work)
            route = self._probe(route, predicted, work, asked)
            pick = Pick(route, work, predicted, forecast(route, prompt_ids, work))  # before its cache moves
        else:
            pick = Pick(self.routes[0], work)
        self.route = pick.route
        if self.choice is not None and not stops and self.choice.engine_now():
            return replace(pick, route=self._engine)
        return pick

    def _probe(self, best: Route, predicted: dict[str, float], work: str, budget: int) -> Route:
        """``best``, or the next-best route whose window fits (``predicted`` holds those) once
        ``best`` has run PROBE_EVERY generations of ``work`` in a row (a budget under
        DECODE_MIN_TOKENS teaches nothing: no probe)."""
        last, n = self._streak.get(work, (None, 0))
        route = best
        others = [r for r in self.routes if r is not best and r.runtime in predicted]
        if last == best.runtime and n >= PROBE_EVERY and others and budget >= DECODE_MIN_TOKENS:
            route = min(others, key=lambda r: predicted[r.runtime])
        self._streak[work] = (route.runtime, n + 1 if route.runtime == last else 1)
        return route

    def finish(self, pick: Pick, metrics: dict | None) -> None:
        """After a generation on ``pick`` (``metrics``: its figures; None: it did not end): a routed
        one's prompt read and decoding teach its route's prices, the engine's figures learn which
        ran and how fast, and the route's cost model is kept (its state in ``metrics``)."""
        route = pick.route
        if metrics is not None and pick.forecast is not None:
            observe(route, pick.forecast, metrics, pick.work)
            metrics.update(predicted_ms=pick.predicted_ms, forecast={k: round(v, 3) for k, v in pick.forecast.items()},
                           work=pick.work)
        if metrics is not None and self.choice is not None:
            self.choice.observe(route.alone, metrics["new_tokens"], metrics["wall_s"])
        if not route.alone and isinstance(route.draft_length, CostModelK):
            self.keep(route)
            if metrics is not None:
                metrics["cost_model"] = route.draft_length.state()

    def keep(self, route: Route | None = None) -> None:
        """Keep ``route``'s (default: the current one's) cost model with what other Sessions of the
        pair kept meanwhile (pairs/cost_store.py ``CostFile.keep``)."""
        route = route or self.route
        if route.cost is not None and isinstance(route.draft_length, CostModelK):
            route.cost.keep(route.draft_length)

    def probe_soon(self) -> None:
        """The drafter changed (a new adapter): every route's draft length looks at it again soon."""
        for r in self.routes:
            r.draft_length.probe_soon()

    @contextmanager
    def sampled(self, sampling: SamplingConfig | None) -> Iterator[None]:
        """Every route's target samples with ``sampling`` inside (None: as it does)."""
        targets = [r.target for r in self.routes]
        if sampling is None or all(t.sampling == sampling for t in targets):
            yield
            return
        if not all(isinstance(t, LocalTarget) for t in targets):
            raise OmniDraftError("a remote target samples with the Session's own settings",
                                 "open a Session with sampling=... for it")
        before = [t.sampling for t in targets]
        for t in targets:
            t.sampling = sampling
        try:
            yield
        finally:
            for t, was in zip(targets, before):
                t.sampling = was
