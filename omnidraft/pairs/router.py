"""Which route a Session's next generation runs on, and what it teaches afterwards. A Session
holds one Router and runs each generation on the one Route it hands out (pairs/routing.py):

- the target's runtime the pair loaded, alone, when nothing else was timed here;
- with `auto` and both runtimes timed by `omnidraft pair`, the one predicted to end the generation
  first (pairs/routing.py ``choose``), whose prompt read and decoding then refine its prices; a
  route that has run a kind of work but fewer than one in PROBE_EVERY of its generations (the
  counts every route's cost model keeps) runs the next one (a route's price for a kind is learnt
  only from its own generations of it: one priced high by a few unlucky ones, say on a busy
  machine, would otherwise never run that kind again), and what it measures moves that price by
  at least PROBE_WEIGHT; a Router probes a route for a kind at most once in PROBE_EVERY of the
  kind's generations it hands out (a route that ran far under one in PROBE_EVERY of a kind, as after
  `omnidraft pair`, or whose count lags another Session's generations merged into the other route's
  file, would otherwise be probed generation after generation until its count caught up); a route
  not loaded yet (pairs/deferred.py) is neither probed nor tried: it is loaded when forecast to end
  first, and dropped where it cannot load (the memory budget);
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
from omnidraft.pairs.deferred import waiting
from omnidraft.pairs.routing import Route, choose, forecast, kind, observe
from omnidraft.sampling import SamplingConfig

# a route runs at least one in this many of the generations of a kind it has run: one priced wrong
# for the kind is retried (its price moves by the kind's learning weight each time), at a cost of at
# most one generation in this many at the slower speed where the price was right
PROBE_EVERY = 16
PROBE_WEIGHT = 0.5  # a probe's weight in its route's price for the kind: it ran because that price looked stale


@dataclass(frozen=True)
class Pick:
    """The route a generation runs on, the kind of work it was judged (pairs/routing.py ``kind``)
    and, where it was routed, each runtime's predicted ms and the chosen route's forecast."""

    route: Route
    work: str
    predicted_ms: dict[str, float] | None = None
    forecast: dict[str, float] | None = None
    probe: bool = False  # run where the forecast did not send it, to check that route's price for the kind


class Router:
    """``routes``: the local runtimes (the bit-exact program first: ties go to it), or the one
    target; ``choice``: an OpenAI-API target's figures for handing generations to the engine."""

    def __init__(self, routes: list[Route], choice: EngineChoice | None = None, note=None):
        self.routes = routes
        self.note = note or (lambda _m: None)
        self.route = routes[0]  # the route the latest generation ran on (or the next, before any)
        self.choice = choice
        self.engine = routes[0].target if choice is not None else None  # the serving engine
        self._engine = replace(routes[0], alone=True)
        self._since: dict[tuple[str, str], int] = {}  # (runtime, kind) -> generations of the kind since its probe

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
            chosen = self._probe(route, predicted, work, asked)
            if not self._ready(chosen):  # it could not load: dropped, the others choose again
                return self.pick(prompt_ids, max_new_tokens, preamble, chat, stops)
            ahead = forecast(chosen, prompt_ids, work)  # before its cache moves
            pick = Pick(chosen, work, predicted, ahead, probe=chosen is not route)
        else:
            pick = Pick(self.routes[0], work)
        self.route = pick.route
        if self.choice is not None and not stops and self.choice.engine_now():
            return replace(pick, route=self._engine)
        return pick

    def _ready(self, route: Route) -> bool:
        """Whether ``route`` can run: loaded, or loaded now (pairs/deferred.py) and reading the
        vocabulary the first route reads; a route that cannot is dropped (``note`` hears why)."""
        model = route.target.model
        if not waiting(model):
            return True
        try:
            model.load()
            if model.vocab_size == self.routes[0].target.model.vocab_size:
                return True
            why = "its vocabulary differs"
        except OmniDraftError as err:
            why = err.problem
        self.routes.remove(route)
        self.note(f"{why}: every generation runs on {self.routes[0].runtime}")
        return False

    def _probe(self, best: Route, predicted: dict[str, float], work: str, budget: int) -> Route:
        """``best``, or the fastest-forecast other route whose window fits (``predicted`` holds
        those) that has run ``work`` but fewer than one in PROBE_EVERY of the routes' generations of
        it, and that this Router has not probed for ``work`` in its last PROBE_EVERY generations of
        it (one never run: routing.py's TRY rule; a budget under DECODE_MIN_TOKENS teaches nothing)."""
        fits = [r for r in self.routes if r.runtime in predicted and not waiting(r.target.model)]
        if not work or budget < DECODE_MIN_TOKENS or len(fits) < 2:
            return best
        for key in self._since:
            if key[1] == work:
                self._since[key] += 1
        ran = {r.runtime: int(r.draft_length.model.decode_scales.get(work, [1.0, 0])[1]) for r in fits}
        starved = [r for r in fits if r is not best and 0 < ran[r.runtime] * PROBE_EVERY < sum(ran.values())
                   and self._since.get((r.runtime, work), PROBE_EVERY) >= PROBE_EVERY]
        if not starved:
            return best
        chosen = min(starved, key=lambda r: predicted[r.runtime])
        self._since[chosen.runtime, work] = 0
        return chosen

    def finish(self, pick: Pick, metrics: dict | None) -> None:
        """After a generation on ``pick`` (``metrics``: its figures; None: it did not end): a routed
        one's prompt read and decoding teach its route's prices, the engine's figures learn which
        ran and how fast, and the route's cost model is kept (its state in ``metrics``)."""
        route = pick.route
        if metrics is not None and pick.forecast is not None:
            observe(route, pick.forecast, metrics, pick.work, PROBE_WEIGHT if pick.probe else 0.0)
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
