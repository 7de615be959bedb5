"""Which of a pair's two local target runtimes runs the next generation, where a Session keeps
both (with `auto`, once `omnidraft pair` has timed them here): the bit-exact ExecuTorch program
and the GGUF on llama.cpp. The two differ most in their wide calls: on the 2-core EPYC of
bench/results/llamacpp-20261127-0730 llama.cpp decodes a token in 30 ms against the program's 38,
but its 32-token call costs 7.3x its one-token call against the program's ~1.5x, so a long
prompt's prefill, and the copies a long context supplies, go far faster on the program.

Each generation runs where it is predicted to end first: the prompt ids the runtime's cache does
not hold yet, read at its measured wide-call cost (v(w) / w per id, w the widest width timed,
scaled by what its prompt reads have measured), plus the token budget at the decoding speed its
cost model predicts (pairs/cost.py, with the round costs it has learnt), scaled by what the
route's earlier generations of the same kind of work took against that prediction: copies from
the context come only from the work itself, so how much they have sped a route's generations is
learnt from them (``observe``), by ``kind``: a completion continues its text, a chat answer to a
long turn (pasted code or a passage to edit, quote or rewrite) repeats much of it, an answer to a
short question little (on bench/results/llamacpp-20261128-1330's program code completions
decoded at 11 tokens/s, edits, quotes and rewrites of pasted text at 20). A route that has not
yet run a kind of work runs it once where forecast within TRY of the best: only the route that runs
a kind learns what it takes, so a forecast off by more than the margin between the routes would
otherwise never be corrected. Ties go to the bit-exact program. Every runtime's cache starts
holding the chat template's preamble (``warm``): otherwise a runtime never chosen yet would be
priced for the system prompt the other already holds, and never be chosen for chat.

Knows cost models, Targets and LM caches; nothing about decoding, tokenizers or the Session.
"""

from __future__ import annotations

from dataclasses import dataclass

from omnidraft.decode.target import LocalTarget
from omnidraft.models.lm import common_prefix, sync
from omnidraft.pairs.cost import DECODE_MIN_TOKENS
from omnidraft.pairs.deferred import waiting
from omnidraft.pairs.cost_store import CostFile


@dataclass(frozen=True)
class Route:
    """Where a Session's generation runs: the target's runtime (executorch, llamacpp, eager,
    remote), its Target, the draft length the pair decodes with there (a CostModelK, or fixed) and
    the file that cost model is kept in (None: nothing to keep). ``alone``: the serving engine
    generating alone (nothing drafted, verified or logged; pairs/router.py hands generations to it)."""

    runtime: str
    target: object  # decode/target.py Target
    draft_length: object  # decode/draft_length.py DraftLength
    cost: CostFile | None = None
    alone: bool = False


PASTED = 48  # ids past the chat preamble from which a turn counts as carrying text to work on
# a route's first forecast of a kind of work (from its other kinds' decoding) was off by up to 18%
# on the AVX2-only EPYC (bench/results/decode-forecast-20261128-1533, kind, pass 1): a route that
# has not run the kind yet and is forecast within this share of the best may be the faster one
TRY = 0.15


def kind(prompt_ids: list[int], preamble: list[int], chat: bool) -> str:
    """The kind of work a prompt asks for, as decoding speed tells kinds apart: ``completion``
    (no chat template), ``chat, long turn`` (at least PASTED ids past the template's ``preamble``),
    else ``chat``."""
    if not chat:
        return "completion"
    return "chat, long turn" if len(prompt_ids) - len(preamble) >= PASTED else "chat"


def warm(models: list, preamble: list[int]) -> None:
    """Every one of ``models`` (LMs) holds ``preamble`` (ids every chat prompt starts with) at the
    start of its cache; one that already does, or is not loaded yet (pairs/deferred.py), is left as it is."""
    for m in models:
        if preamble and m.tokens[:len(preamble)] != preamble and not waiting(m):
            sync(m, preamble)


def cached(route: Route, prompt_ids: list[int]) -> int:
    """Prompt ids ``route``'s target cache holds already (none where each generation forks a fresh
    cache, or for a server)."""
    m = route.target.model if isinstance(route.target, LocalTarget) else None
    if m is None or callable(getattr(m, "fork", None)):
        return 0
    return min(common_prefix(m.tokens, prompt_ids), len(prompt_ids) - 1)


def forecast(route: Route, prompt_ids: list[int], work: str = "") -> dict[str, float]:
    """What ``route`` is predicted to take for a prompt of kind ``work`` now: ``prefill_ms`` for the
    ``prompt_ids_read`` its cache lacks (pairs/cost.py ``prefill_ms``), then ``tokens_per_s``
    decoding: ``drafts_tokens_per_s`` (what its cost model predicts from drafts) over the decode
    scale its generations of that kind have measured."""
    dl = route.draft_length
    uncached = len(prompt_ids) - min(common_prefix(route.target.model.tokens, prompt_ids), len(prompt_ids) - 1)
    drafts = max(dl.predicted, 1e-9)
    return {"prefill_ms": dl.model.prefill_ms(uncached), "tokens_per_s": drafts / dl.model.decode_scale_for(work),
            "drafts_tokens_per_s": drafts, "prompt_ids_read": uncached}


def observe(route: Route, ahead: dict[str, float], metrics: dict, work: str = "", least: float = 0.0) -> None:
    """Teach ``route``'s cost model from a generation of kind ``work`` it ran: ``ahead`` is the
    forecast made before it, ``metrics`` what it took (prefill_s, wall_s, new_tokens); its prompt
    read moves the prefill price, its decoding the decode scale (the route's and the kind's, the
    latter by at least ``least``: pairs/cost.py ``observe_decode``)."""
    model = route.draft_length.model
    model.observe_prefill(ahead["prompt_ids_read"], metrics["prefill_s"])
    model.observe_decode(ahead["drafts_tokens_per_s"], metrics["new_tokens"], metrics["wall_s"] - metrics["prefill_s"],
                         work, least)


def predicted_ms(route: Route, prompt_ids: list[int], budget: int, work: str = "") -> float:
    """The generation's predicted ms on ``route``: its uncached prompt ids, then ``budget`` tokens."""
    f = forecast(route, prompt_ids, work)
    return f["prefill_ms"] + budget * 1e3 / f["tokens_per_s"]


def choose(routes: list[Route], prompt_ids: list[int], budget: int,
           work: str = "") -> tuple[Route, dict[str, float]]:
    """(the route predicted to end first for work of kind ``work``, {runtime: predicted ms}) among
    those whose context window holds the prompt and ``budget`` tokens (none does: the widest
    window alone); a tie goes to the first listed (the Session lists the bit-exact program first).
    Where the best has run ``work`` before, a route that has not and is forecast within TRY of it
    runs instead: once, as its generation teaches it the kind (a budget under DECODE_MIN_TOKENS
    would teach it nothing; not one still to be loaded, pairs/deferred.py)."""
    fits = [r for r in routes if r.target.max_length - len(prompt_ids) >= budget]
    fits = fits or [max(routes, key=lambda r: r.target.max_length)]
    times = {r.runtime: predicted_ms(r, prompt_ids, budget, work) for r in fits}
    best = min(fits, key=lambda r: times[r.runtime])
    near = (1 + TRY) * times[best.runtime]
    untried = [r for r in fits if work and budget >= DECODE_MIN_TOKENS and not waiting(r.target.model)
               and work not in r.draft_length.model.decode_scales and times[r.runtime] <= near]
    if untried and work in best.draft_length.model.decode_scales:  # the best has run it: try one that has not
        best = min(untried, key=lambda r: times[r.runtime])
    return best, {rt: round(ms, 1) for rt, ms in times.items()}
