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
route's earlier generations took against that prediction: copies from the context come only
from the work itself, so how much they have sped a route's generations is learnt from them
(``observe``). Ties go to the bit-exact program. Every runtime's cache starts holding the chat
template's preamble (``warm``): otherwise a runtime never chosen yet would be priced for the
system prompt the other already holds, and never be chosen for chat.

Knows cost models and LM caches; nothing about decoding, tokenizers or the Session.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omnidraft.models.lm import common_prefix, sync


@dataclass
class Route:
    """One target runtime as a Session runs it: its Target, its draft length (a CostModelK) and
    where that cost model is kept."""

    runtime: str
    target: object  # decode/target.py LocalTarget
    draft_length: object  # decode/draft_length.py CostModelK
    cost_path: Path
    cost_on: dict


def warm(models: list, preamble: list[int]) -> None:
    """Every one of ``models`` (LMs) holds ``preamble`` (ids every chat prompt starts with) at the
    start of its cache; one that already does is left as it is."""
    for m in models:
        if preamble and m.tokens[:len(preamble)] != preamble:
            sync(m, preamble)


def forecast(route: Route, prompt_ids: list[int]) -> dict[str, float]:
    """What ``route`` is predicted to take for a prompt now: ``prefill_ms`` for the
    ``prompt_ids_read`` its cache lacks (pairs/cost.py ``prefill_ms``), then ``tokens_per_s``
    decoding: ``drafts_tokens_per_s`` (what its cost model predicts from drafts) over the
    ``decode_scale`` its generations have measured."""
    dl = route.draft_length
    uncached = len(prompt_ids) - min(common_prefix(route.target.model.tokens, prompt_ids), len(prompt_ids) - 1)
    drafts = max(dl.predicted, 1e-9)
    return {"prefill_ms": dl.model.prefill_ms(uncached), "tokens_per_s": drafts / dl.model.decode_scale,
            "drafts_tokens_per_s": drafts, "prompt_ids_read": uncached}


def observe(route: Route, ahead: dict[str, float], metrics: dict) -> None:
    """Teach ``route``'s cost model from a generation it ran: ``ahead`` is the forecast made before
    it, ``metrics`` what it took (prefill_s, wall_s, new_tokens); its prompt read moves the prefill
    price, its decoding the decode scale."""
    model = route.draft_length.model
    model.observe_prefill(ahead["prompt_ids_read"], metrics["prefill_s"])
    model.observe_decode(ahead["drafts_tokens_per_s"], metrics["new_tokens"], metrics["wall_s"] - metrics["prefill_s"])


def predicted_ms(route: Route, prompt_ids: list[int], budget: int) -> float:
    """The generation's predicted ms on ``route``: its uncached prompt ids, then ``budget`` tokens."""
    f = forecast(route, prompt_ids)
    return f["prefill_ms"] + budget * 1e3 / f["tokens_per_s"]


def choose(routes: list[Route], prompt_ids: list[int], budget: int) -> tuple[Route, dict[str, float]]:
    """(the route predicted to end first, {runtime: predicted ms}) among those whose context
    window holds the prompt and ``budget`` tokens (none does: the widest window alone); a tie
    goes to the first listed (the Session lists the bit-exact program first)."""
    fits = [r for r in routes if r.target.max_length - len(prompt_ids) >= budget]
    fits = fits or [max(routes, key=lambda r: r.target.max_length)]
    times = {r.runtime: predicted_ms(r, prompt_ids, budget) for r in fits}
    best = min(fits, key=lambda r: times[r.runtime])
    return best, {rt: round(ms, 1) for rt, ms in times.items()}
