"""`omnidraft demo` as a library function: the product on this machine, honestly. Build the
ExecuTorch programs of SmolLM2-135M (drafter) and Qwen2.5-Coder-0.5B (target) when missing,
pair them (cost model + calibration), then on prompts the pairing did not see run the pair and
the target alone side by side, interleaved per prompt (and llama.cpp alone, when
llama-cpp-python is installed), on two kinds of work: assistant work whose answer repeats its
context (code edits, quoted answers, rewrites: the copies from the context pay there) and plain
code and chat prompts (where, on most CPUs, the cost model holds the 0.5B's drafter back). Then
the pair with use: recurring work (omnidraft/recurring.py) timed with an empty memory, again after a
short stream of related work (never the same prompts) was answered and remembered, saying what
changed and why (a scratch memory: the pair's own is neither read nor changed). Then one training
round on what was logged, and the plain prompts again (never logged, so never trained on).

Knows the Session, the comparison (compare.py), the pairing job, the program builder and the
tuning round; printing is the caller's (``say``).
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable

from omnidraft.jobs.compare import measure
from omnidraft.jobs.pairing import baseline, format_report, pair
from omnidraft.pairs.spec import DEFAULT_DRAFTER
from omnidraft.prompts import CHAT_PROMPTS, humaneval

TARGET = "qwen2.5-coder-0.5b"
NOTICEABLE = 1.05  # a gain the demo calls an improvement: beyond a few prompts' run-to-run noise here
ALPHA = 0.05  # acceptance must rise with one-sided p below this


def held_out_prompts(n: int) -> list[str]:
    """Code and chat prompts outside the pairing's calibration set (pairing.builtin_prompts)."""
    code, chat = humaneval(start=10, limit=n), CHAT_PROMPTS[10:10 + n]
    return [p for pair in zip(code, chat) for p in pair][:n]


def copy_work(n: int) -> list[str]:
    """``n`` single-turn requests whose answers repeat their context: a code edit, a quote, a
    rewrite, in turn (omnidraft/copy_prompts.py; its follow-ups need an earlier turn, left out)."""
    from omnidraft.copy_prompts import copy_prompts

    convs = copy_prompts()
    edits, quotes, rewrites = convs[:8], convs[8:14], convs[14:20]
    return [c[0] for trio in zip(edits, quotes, rewrites) for c in trio][:n]


def demo(*, prompts: int = 4, max_new_tokens: int = 48, calibration_s: float = 60.0,
         say: Callable[..., None] | None = None, llamacpp: bool = True) -> dict:
    """The README's main job (see the module docstring); returns what it printed, as numbers."""
    import torch

    from omnidraft.device.cpu import cpu_info
    from omnidraft.measure.stamp import cpu_line
    from omnidraft.models.loading import load_model
    from omnidraft.pairs import programs
    from omnidraft.session import Session
    from omnidraft.train.tuning import RoundConfig, run_round

    say = say or (lambda *a, **k: print(*a, flush=True, **k))
    err = lambda *a, **k: print(*a, file=sys.stderr, flush=True, **k)  # noqa: E731 - progress lines
    show = lambda text: say(text, end="")  # noqa: E731 - streamed text and rows
    t0 = time.perf_counter()
    say(f"OmniDraft demo: {DEFAULT_DRAFTER} drafting for {TARGET} on {cpu_line(cpu_info(), torch.get_num_threads())}")
    built = programs.ensure(DEFAULT_DRAFTER, TARGET, say=err)
    session = Session(DEFAULT_DRAFTER, TARGET)
    report = pair(TARGET, session=session, calibration_s=calibration_s, max_new_tokens=max_new_tokens, say=err,
                  llamacpp=False)
    report["programs_built"] = built
    say(format_report(report))
    llama = baseline(session, say) if llamacpp else None
    rows = "the pair beside the target alone" + (" and llama.cpp alone" if llama else "")

    work, shown = copy_work(prompts), held_out_prompts(prompts)
    with session.unlogged():  # held out: never trained on
        say(f"\n1. Assistant work that repeats its context (code edits, quotes, rewrites; chat template, "
            f"{2 * max_new_tokens} new tokens): {rows}, interleaved per prompt")
        copies = measure(session, work, max_new_tokens=2 * max_new_tokens, ar=True, chat=True, say=err,
                         llamacpp=llama, show=show)
        say(f"\n2. Plain code and chat prompts ({max_new_tokens} new tokens): {rows}")
        before = measure(session, shown, max_new_tokens=max_new_tokens, ar=True, say=err, llamacpp=llama,
                         show=show)
    say("\nOn prompts none of this was calibrated or trained on (greedy; every output is the target's own):")
    say(f"  {_row('assistant work with copies', copies)}; {_copies(copies)}")
    say(f"  {_row('plain prompts', before)}; {_reading(session)}")

    used = with_use(session, prompts, max_new_tokens, llama, rows, say, err, show)

    say("\none training round on the logged verifications ...")
    if llama is not None:  # nothing generates while the round trains: llama.cpp's copy is let go meanwhile
        llama.close()
    cfg = RoundConfig.from_dict({"min_records": 2, "train": {"update_interval": 2, "batch_size": 2}})
    result = run_round(session.spec, session.log, session.store, load_model(DEFAULT_DRAFTER, dtype="fp32").model,
                       cfg, progress=lambda m: err(f"\r  {m}", end=""))
    err("")
    after = None
    if result["status"] == "published":
        judged = (f"not significantly worse on {result['held_out']} held-out records: teacher-forced acceptance "
                  f"{result['acceptance_before']:.3f} -> {result['acceptance_after']:.3f}, p = "
                  f"{result['guard_p_worse']:.2g}" if result.get("held_out") else "no held-out records yet")
        say(f"  published {result['version']} ({judged})")
        llama = baseline(session, say) if llama is not None else None
        with session.unlogged():
            after = measure(session, shown, max_new_tokens=max_new_tokens, ar=True, say=err, label="after training",
                            llamacpp=llama)
        k_now = session.draft_length.next_k()
        drafted = (f"acceptance {after['acceptance_rate']:.3f} over {after['proposed']} drafted tokens "
                   f"(k = {k_now} now" + (": those were the probe rounds a new adapter gets, and they did not "
                                          "pay, so the target runs alone again)" if k_now == 0 else ")")
                   if after["proposed"] else "no drafts: the cost model still runs the target alone")
        say(f"  {_row('plain prompts after training', after)}; {drafted}")
        say("  " + _verdict(before, after, result))
    else:
        why = (f"the candidate was significantly worse on held-out records (acceptance "
               f"{result['acceptance_before']:.3f} -> {result['acceptance_after']:.3f}, "
               f"p = {result['guard_p_worse']:.3g})" if result.get("held_out") else
               f"too few records ({result.get('new_records', 0)} new, {cfg.min_records} needed)")
        say(f"  no adapter published: {why}; the pair keeps {session.version}")
    say(f"\ndemo finished in {time.perf_counter() - t0:.0f} s")
    return {"pair": report, "copies": copies, "held_out": before, "with_use": used, "round": result, "after": after}


STREAM = 4  # related prompts of each recurring kind the demo's memory takes in (12 in all)


def with_use(session, prompts: int, max_new_tokens: int, llama, rows: str, say, err, show) -> dict:
    """Recurring work on an empty memory, then again after a stream of related work was answered and
    remembered: the pair beside the target alone (and llama.cpp) each time, and what changed, in words."""
    import shutil
    import tempfile
    from pathlib import Path

    from omnidraft.memory.spaces import Memories
    from omnidraft.recurring import mixed

    held, stream = mixed(max(1, prompts // 2), held=True), mixed(STREAM)
    folder = Path(tempfile.mkdtemp(prefix="omnidraft-demo-memory-"))
    own, session.memories = session.memories, Memories(folder, note=err)
    try:
        say(f"\n3. The pair with use: recurring work (tests for one codebase, invoices into one JSON schema, "
            f"replies under one policy; {len(held)} prompts), {rows}, first with an empty memory")
        with session.unlogged(memory="read"):
            cold = measure(session, held, max_new_tokens=max_new_tokens, ar=True, chat=True, say=err, llamacpp=llama,
                           show=show)
        err(f"answering {len(stream)} related prompts (never the ones timed); each answer is remembered ...")
        for n, p in enumerate(stream, 1):
            session.new_conversation()
            with session.unlogged(memory="on"):
                session.generate(p, chat=True, max_new_tokens=max_new_tokens)
            err(f"\r  {n}/{len(stream)}", end="")
        err("")
        say(f"   the same {len(held)} prompts again, after those {len(stream)} answers")
        with session.unlogged(memory="read"):
            warm = measure(session, held, max_new_tokens=max_new_tokens, ar=True, chat=True, say=err, llamacpp=llama,
                           show=show)
    finally:
        session.memories.close()
        session.memories = own
        shutil.rmtree(folder, ignore_errors=True)
    say(f"  {_row('recurring work, empty memory', cold)}")
    say(f"  {_row(f'recurring work after {len(stream)} answers', warm)}")
    say("  " + _remembered(cold, warm))
    return {"cold": cold, "warm": warm, "stream": len(stream)}


def _remembered(cold: dict, warm: dict) -> str:
    """What the memory changed, in words: against the target alone measured beside it each time."""
    gain = warm["speedup"] / max(cold["speedup"], 1e-9)
    if not warm["recalled"]:
        return ("nothing matched here: no earlier answer continued these texts, so the memory proposed nothing "
                f"and the pair ran as before ({cold['speedup']:.2f}x -> {warm['speedup']:.2f}x the target alone)")
    return (f"the memory proposed {warm['recalled']} ids from earlier answers and the target kept "
            f"{warm['recalls_kept']}: {warm['tokens_per_target_forward']:.2f} tokens per target forward "
            f"(was {cold['tokens_per_target_forward']:.2f}), the pair {cold['speedup']:.2f}x -> "
            f"{warm['speedup']:.2f}x the target alone ({gain:.2f}x with use)")


def _row(label: str, m: dict) -> str:
    """One line of figures: the pair against the target alone (and llama.cpp alone)."""
    line = (f"{label}: pair {m['tokens_per_s']:.1f} tokens/s, target alone {m['ar_tokens_per_s']:.1f} "
            f"({m['speedup']:.2f}x)")
    if "llamacpp_tokens_per_s" in m:
        line += f", llama.cpp alone {m['llamacpp_tokens_per_s']:.1f} ({m['vs_llamacpp']:.2f}x)"
    return line + f", {m['tokens_per_target_forward']:.2f} tokens per target forward"


def _copies(m: dict) -> str:
    """What the copies from the context did, in words."""
    copies = (f"{m['copies_kept']} of {m['copied']} ids copied from the context kept by the target"
              if m["copied"] else "no copies proposed")
    drafts = (f"the drafter's acceptance {m['acceptance_rate']:.3f} over {m['proposed']} drafted tokens"
              if m["proposed"] else "no drafts")
    return f"{copies}, {drafts}"


def _verdict(before: dict, after: dict, result: dict) -> str:
    """Whether the published round measurably helped on the unseen prompts, in words. An
    improvement is claimed only when the drafter drafted in both phases, its acceptance rose
    beyond noise (one-sided two-proportion test, p < ALPHA) and the pair gained >= NOTICEABLE
    relative to the target alone measured beside it in each phase (interleaved per prompt), so a
    machine that got busier or quieter between the phases does not pass for the drafter's doing."""
    ratio_after = after["tokens_per_s"] / max(after["ar_tokens_per_s"], 1e-9)
    gain = ratio_after / max(before["speedup"], 1e-9)
    rate = lambda m: m["accepted"] / max(m["proposed"], 1)  # noqa: E731
    measured = (f"the pair {before['speedup']:.2f}x -> {ratio_after:.2f}x the target alone's tokens/s "
                f"({gain:.2f}x), acceptance {rate(before):.3f} -> {rate(after):.3f}")
    if not before["proposed"] or not after["proposed"]:
        phases = ("both phases" if not before["proposed"] and not after["proposed"] else
                  "the phase before training" if not before["proposed"] else "the phase after training")
        why = (f"the cost model ran the target alone in {phases}, so no change of the drafter can show "
               "(the ratio moved with the machine's noise on the same work)")
    else:
        p = _p_rose(before, after)
        if p >= ALPHA:
            why = f"acceptance did not rise beyond noise (one-sided p = {p:.2g})"
        elif gain < NOTICEABLE:
            why = (f"acceptance rose (one-sided p = {p:.2g}) but the speed relative to the target alone "
                   f"did not gain {NOTICEABLE - 1:.0%}")
        else:
            return f"a measured improvement on prompts never trained on: {measured} (one-sided p = {p:.2g})"
    return (f"no measured improvement on these prompts ({measured}): {why}; one round on "
            f"{len(result.get('record_ids', ()))} records moves a drafter little, and the daemon "
            "(`omnidraft daemon start`) keeps training with use (`omnidraft bench usage` measures it)")


def _p_rose(before: dict, after: dict) -> float:
    """One-sided p-value that the acceptance rate after exceeds the one before by chance alone
    (pooled two-proportion z-test over drafted tokens)."""
    n1, n2 = before["proposed"], after["proposed"]
    p1, p2 = before["accepted"] / n1, after["accepted"] / n2
    pooled = (before["accepted"] + after["accepted"]) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 0.0 if p2 > p1 else 1.0
    return 0.5 * math.erfc((p2 - p1) / se / math.sqrt(2))


def _reading(session) -> str:
    """The cost model's current choice, in words."""
    state = getattr(session.draft_length, "state", None)
    if state is None:
        return f"fixed draft length {session.draft_length.next_k()}"
    s = state()
    if s["k"]:
        return f"the cost model drafts k = {s['k']} (predicted {s['predicted_tokens_per_s']:.1f} tokens/s)"
    return (f"the cost model runs the target alone here: drafting is not predicted to pay on this CPU "
            f"(best k = {s['best_k']}: {s['best_k_tokens_per_s']:.1f} vs {s['target_alone_tokens_per_s']:.1f} "
            "tokens/s)")
