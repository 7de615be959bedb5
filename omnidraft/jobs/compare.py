"""The pair beside the target alone (and llama.cpp alone, or a serving engine alone), interleaved
per prompt: what `omnidraft pair` calibrates with and what the demo shows. Each prompt is a
conversation of its own; the runs on one prompt start from the same caches (models/lm.py
same_start), in an order that alternates from prompt to prompt, so neither side always finds a
warmed-up machine or the other's prompt in its cache (measure/interleave.py's rotation).

Knows the Session and how each baseline is run; printing is the caller's (``say``, ``show``).
"""

from __future__ import annotations

import time
from typing import Callable

from omnidraft.decode.generate import generate_ar
from omnidraft.decode.text import drained, encode_prompt
from omnidraft.measure.interleave import rotated
from omnidraft.measure.tally import Tally
from omnidraft.models.lm import same_start
from omnidraft.pairs.llamacpp import LlamaCppAlone


def _bar(done: int, total: int, t0: float, width: int = 24) -> str:
    fill = int(width * done / max(total, 1))
    return f"[{'#' * fill}{'-' * (width - fill)}] {done}/{total} prompts, {time.perf_counter() - t0:.0f} s"


def measure(session, prompts: list[str], *, max_new_tokens: int, ar: bool, say: Callable[..., None],
            budget_s: float | None = None, label: str = "calibrating", llamacpp: LlamaCppAlone | None = None,
            chat: bool = False, show: Callable[[str], None] | None = None) -> dict:
    """Run ``prompts`` (through the chat template with ``chat``) on the session, and on the target
    alone when ``ar`` (an OpenAI-API target: its engine alone), and on ``llamacpp`` when given.
    Whole-generation tokens/s for each, decode-only (prefill excluded) for the pair. ``budget_s``:
    start no prompt the prompts so far (their mean time) predict to end after that many seconds;
    the first always runs. ``show``: sees each prompt, the pair's text as it streams and each
    prompt's row of figures (else ``say`` draws a progress bar)."""
    engine = session.engine if session.spec.remote else None  # an OpenAI-API target's engine
    t0 = time.perf_counter()
    pair, alone, llama = Tally(), Tally(), Tally()
    # no saved conversation states: a prompt measured again (the demo's recurring work) would restore its first run's
    with session.conversations.states_off():
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
            pair.add_metrics(m)
            row = (f"pair {m['tokens_per_s']:.1f} tokens/s, {m['new_tokens'] / max(m['target_forwards'], 1):.2f} "
                   "tokens per target forward")
            if ar:
                alone.add_metrics(a)
                row += f" | target alone {a['tokens_per_s']:.1f} tokens/s"
            elif engine is not None:
                got = engine.generate_alone(ids, max_new_tokens)
                alone.add(got.tokens, got.seconds)
            if llamacpp is not None:
                n_llama, s_llama = llamacpp(ids, max_new_tokens)
                llama.add(n_llama, s_llama)
                row += f" | llama.cpp alone {n_llama / max(s_llama, 1e-9):.1f} tokens/s"
            if show:
                show(f"\n[{row}]\n")
            else:
                say(f"\r{label} {_bar(n + 1, len(prompts), t0)}", end="")
    if not show:
        say("")
    return _rates(pair, alone, llama)


def _rates(pair: Tally, alone: Tally, llama: Tally) -> dict:
    """The pair's figures (the drafter's acceptance, not the copies'), and its ratios to the others."""
    translate = pair.translate_ms_median()
    out = {"prompts": pair.prompts, "proposed": pair.drafted, "accepted": pair.accepted,
           "acceptance_rate": round(pair.acceptance() or 0.0, 4), "copied": pair.copied,
           "copies_kept": pair.copies_kept, "recalled": pair.recalled, "recalls_kept": pair.recalls_kept,
           "tokens_per_s": round(pair.tokens_per_s(), 3),
           "decode_tokens_per_s": round(pair.decode_tokens_per_s(), 3),
           "tokens_per_target_forward": round(pair.tokens_per_forward(), 3),
           "translate_ms": 0.0 if translate is None else round(translate, 3)}
    for key, other, ratio in (("ar_tokens_per_s", alone, "speedup"), ("llamacpp_tokens_per_s", llama, "vs_llamacpp")):
        if other.wall:
            out[key] = round(other.tokens_per_s(), 3)
            out[ratio] = round(out["tokens_per_s"] / out[key], 3)
    return out
