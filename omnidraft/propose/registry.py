"""The strategies: one registry from name to how its proposer is built and what it promises.

This is the only place a strategy name is tested. Adding a strategy is a proposer module (the
``Proposer`` protocol, propose/base.py) plus one ``Strategy`` line below. ``exact_q`` says the q'
a proposal carries is the distribution its tokens were drawn from, so rejection sampling against
it is lossless (decode/modes.py). Knows each proposer's constructor; nothing about the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from omnidraft.sampling import SamplingConfig
from omnidraft.errors import OmniDraftError
from omnidraft.models.lm import LM
from omnidraft.propose.base import Proposer
from omnidraft.propose.drafter import Drafter
from omnidraft.propose.lookup import LookupProposer
from omnidraft.propose.slrs import SLRSProposer, StringDistribution
from omnidraft.propose.translating import TranslatingProposer
from omnidraft.translate.strings import StringTranslator
from omnidraft.translate.token import Translator


@dataclass(frozen=True)
class Strategy:
    name: str
    build: Callable[..., Proposer] | None  # (pair, drafter LM, sampling, head, cfg); None: `ar`
    exact_q: bool  # q' is exact: rejection sampling against it is lossless
    summary: str

    @property
    def speculative(self) -> bool:
        return self.build is not None

    def proposer(self, pair, lm: LM, sampling: SamplingConfig, cfg, head=None) -> Proposer:
        """One generation's proposer over the drafter ``lm`` (its own cache) and the pair's state."""
        if self.build is None:
            raise OmniDraftError(f"strategy {self.name!r} has no drafter", "use a speculative strategy")
        return self.build(pair, lm, sampling, head, cfg)


def _token(pair, lm, sampling, head, cfg, *, ngrams: bool, restrict: bool) -> Proposer:
    tok = pair.target_tok if ngrams and cfg.retokenise else None  # omnidraft: the target's tokenisation too
    key = ("token+ngrams" if ngrams else "token") + ("+retokenise" if tok is not None else "")
    translator = pair.shared(key, lambda: Translator(pair.vmap, pair.cache if ngrams else None, tok))
    drafter = Drafter(lm, sampling, translator.direct_mask if restrict else None, head)
    learn = pair.cache if ngrams and cfg.learn_ngrams else None
    return TranslatingProposer(drafter, translator, drafter.stop_rule(cfg), learn)


def _string(pair, lm, sampling, head, cfg, *, align: bool) -> Proposer:
    drafter = Drafter(lm, sampling, None, head)
    return TranslatingProposer(drafter, StringTranslator(pair.vmap, pair.target_tok, align=align),
                               drafter.stop_rule(cfg))


def _slrs(pair, lm, sampling, head, cfg) -> Proposer:
    drafter = Drafter(lm, sampling, None, head)
    drafter.stop_rule(cfg)  # the same configuration errors as every strategy; slrs drafts k
    return SLRSProposer(drafter, pair.shared("slrs", lambda: StringDistribution(pair.vmap)))


_ALL = (
    Strategy("ar", None, exact_q=True, summary="the target alone"),
    Strategy("tli", lambda *a: _token(*a, ngrams=False, restrict=True), exact_q=True,
             summary="drafter renormalised over the shared vocabulary, direct map (SpD_DM)"),
    Strategy("omnidraft", lambda *a: _token(*a, ngrams=True, restrict=False), exact_q=False,
             summary="the target's tokenisation of the draft, n-gram cache, direct map (rules (1)(2))"),
    Strategy("slem", lambda *a: _string(*a, align=False), exact_q=False,
             summary="string-level exact match: the draft text re-tokenised by the target"),
    Strategy("dtw", lambda *a: _string(*a, align=True), exact_q=False,
             summary="TokenTiming: the slem proposal aligned by dynamic token warping"),
    Strategy("slrs", _slrs, exact_q=True,
             summary="string-level rejection sampling over the drafter's string distribution"),
    Strategy("lookup", lambda *a: LookupProposer(), exact_q=True,
             summary="ids copied from the context where its suffix occurred before (no drafter)"),
)
REGISTRY: dict[str, Strategy] = {s.name: s for s in _ALL}
STRATEGIES = tuple(REGISTRY)


def get(name: str) -> Strategy:
    try:
        return REGISTRY[name]
    except KeyError:
        raise OmniDraftError(f"unknown strategy '{name}'", f"choose one of {', '.join(STRATEGIES)}") from None
