"""The pair beside the target alone (and llama.cpp alone, or a serving engine alone), interleaved
per prompt: what `omnidraft pair` calibrates with and what the demo shows. Each prompt is a
conversation of its own; the runs on one prompt start from the same caches (models/lm.py
same_start), in an order that alternates from prompt to prompt, so neither side always finds a
warmed-up machine or the other's prompt in its cache (measure/interleave.py's rotation).

Knows the Session and how each baseline is run; printing is the caller's (``say``, ``show``).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from omnidraft.decode.generate import generate_ar
from omnidraft.decode.text import drained, encode_prompt
from omnidraft.measure.interleave import rotated
from omnidraft.models.lm import same_start
from omnidraft.pairs.llamacpp import LlamaCppAlone

COUNTS = ("tokens", "wall", "decode", "proposed", "accepted", "copied", "copies_kept", "forwards", "ar_tokens",
          "ar_wall", "ar_decode", "llamacpp_tokens", "llamacpp_wall", "prompts")


def _bar(done: int, total: int, t0: float, width: int = 24) -> str:
    fill = int(width * done / max(total, 1))
    return f"[{'#' * fill}{'-' * (width - fill)}] {done}/{total} prompts, {time.perf_counter() - t0:.0f} s"


def measure(session, prompts: list[str], *, max_new_tokens: int, ar: bool, say: Callable[..., None],
            budget_s: float | None = None, label: str = "calibrating", llamacpp: LlamaCppAlone | None = None,
            chat: bool = False, show: Callable[[str], None] | None = None) -> dict:
    """Run ``prompts`` (through the chat template with ``chat``) on the session, and on the target
    alone when ``ar`` (an OpenAI-API target: its engine alone), and on ``llamacpp`` when given.
    Whole-generation and decode-only (prefill excluded) tokens/s for the pair and the target
    alone; whole-generation for llama.cpp (it reports no prefill time). ``budget_s``: start no
    prompt the prompts so far (their mean time) predict to end after that many seconds; the
    first always runs. ``show``: sees each prompt, the pair's text as it streams and each
    prompt's row of figures (else ``say`` draws a progress bar)."""
    engine = session.engine if session.spec.remote else None  # an OpenAI-API target's engine
    t0 = time.perf_counter()
    tot = dict.fromkeys(COUNTS, 0)
    translate: list[float] = []
    for n, p in enumerate(prompts):
        if budget_s is not None and n and (time.perf_counter() - t0) * (n + 1) / n > budget_s:
            break
        session.new_conversation()  # unrelated prompts: none copies from another's answer
        ids = encode_prompt(session.target_tok, p, chat=chat)
        if show:
            show(f"\n>>> {' '.join(p.split())[:70]}\n")
        again = same_start(session.target_model, session.drafter) if ar else None
        order = rotated(["pair", "alone"], n) if ar else ["pair"]  # the target alone first on every other prompt
        for j, side in enumerate(order):
            if j:
                again()
            if side == "pair":
                m = drained(session.stream(p, max_new_tokens=max_new_tokens, chat=chat), show).metrics
            else:
                a = generate_ar(session.target, session.target_tok, p, max_new_tokens=max_new_tokens,
                                chat=chat).metrics
        row = _add_pair(tot, m, translate)
        if ar:
            tot["ar_tokens"] += a["new_tokens"]
            tot["ar_wall"] += a["wall_s"]
            tot["ar_decode"] += a["wall_s"] - a["prefill_s"]
            row += f" | target alone {a['tokens_per_s']:.1f} tokens/s"
        elif engine is not None:
            alone = engine.generate_alone(ids, max_new_tokens)
            tot["ar_tokens"] += alone.tokens
            tot["ar_wall"] += alone.seconds
        if llamacpp is not None:
            n_llama, s_llama = llamacpp(ids, max_new_tokens)
            tot["llamacpp_tokens"] += n_llama
            tot["llamacpp_wall"] += s_llama
            row += f" | llama.cpp alone {n_llama / max(s_llama, 1e-9):.1f} tokens/s"
        tot["prompts"] += 1
        if show:
            show(f"\n[{row}]\n")
        else:
            say(f"\r{label} {_bar(n + 1, len(prompts), t0)}", end="")
    if not show:
        say("")
    return _rates(tot, translate)


def _add_pair(tot: dict, m: dict, translate: list[float]) -> str:
    """Fold one pair generation's metrics in; its row of figures."""
    kinds = m.get("rounds_by_kind", {})
    drafted = kinds.get("drafter", {"proposed": 0, "accepted": 0})
    copied = kinds.get("lookup", {"proposed": 0, "accepted": 0})
    for key, value in (("tokens", m["new_tokens"]), ("wall", m["wall_s"]), ("decode", m["wall_s"] - m["prefill_s"]),
                       ("proposed", drafted["proposed"]), ("accepted", drafted["accepted"]),
                       ("copied", copied["proposed"]), ("copies_kept", copied["accepted"]),
                       ("forwards", m["target_forwards"])):
        tot[key] += value
    if m["translate_ms_median"] is not None and drafted["proposed"]:
        translate.append(m["translate_ms_median"])
    return (f"pair {m['tokens_per_s']:.1f} tokens/s, {m['new_tokens'] / max(m['target_forwards'], 1):.2f} tokens "
            "per target forward")


def _rates(tot: dict, translate: list[float]) -> dict:
    """The totals as rates: the drafter's acceptance (not the copies'), tokens/s, ratios."""
    out = {"prompts": tot["prompts"], "proposed": tot["proposed"], "accepted": tot["accepted"],
           "acceptance_rate": round(tot["accepted"] / max(tot["proposed"], 1), 4),
           "copied": tot["copied"], "copies_kept": tot["copies_kept"],
           "tokens_per_s": round(tot["tokens"] / max(tot["wall"], 1e-9), 3),
           "decode_tokens_per_s": round(tot["tokens"] / max(tot["decode"], 1e-9), 3),
           "tokens_per_target_forward": round(tot["tokens"] / max(tot["forwards"], 1), 3),
           "translate_ms": round(statistics.median(translate), 3) if translate else 0.0}
    if tot["ar_wall"]:
        out["ar_tokens_per_s"] = round(tot["ar_tokens"] / tot["ar_wall"], 3)
        out["speedup"] = round(out["tokens_per_s"] / out["ar_tokens_per_s"], 3)
    if tot["ar_decode"]:
        out["ar_decode_tokens_per_s"] = round(tot["ar_tokens"] / tot["ar_decode"], 3)
    if tot["llamacpp_wall"]:
        out["llamacpp_tokens_per_s"] = round(tot["llamacpp_tokens"] / tot["llamacpp_wall"], 3)
        out["vs_llamacpp"] = round(out["tokens_per_s"] / out["llamacpp_tokens_per_s"], 3)
    return out
