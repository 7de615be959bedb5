"""`omnidraft pair` as a library function: pair a drafter with a target (vocabulary map, seeded
n-grams, a fresh adapter and head), calibrate on built-in prompts beside the target alone and
llama.cpp alone (when installed), and report.
Knows the Session and the prompts; nothing about training rounds (the demo's, demo.py);
printing is the caller's (``say``).
"""

from __future__ import annotations

import copy
import sys
import time
from typing import Callable

from omnidraft.decode.draft_length import CostModelK
from omnidraft.errors import OmniDraftError
from omnidraft.pairs.engine_choice import PROBE_EVERY
from omnidraft.pairs.build import is_remote
from omnidraft.pairs.llamacpp import LlamaCppAlone, check_engine, llamacpp_engine
from omnidraft.pairs.spec import DEFAULT_DRAFTER, pair_dir
from omnidraft.prompts import CHAT_PROMPTS, humaneval

ACCEPTANCE_K = 5  # draft length while pairing measures acceptance per position
ACCEPTANCE_PROMPTS = 6  # prompts (at most) for that, before the calibration proper


def _bar(done: int, total: int, t0: float, width: int = 24) -> str:
    fill = int(width * done / max(total, 1))
    return f"[{'#' * fill}{'-' * (width - fill)}] {done}/{total} prompts, {time.perf_counter() - t0:.0f} s"


def builtin_prompts() -> list[str]:
    """Alternating code and chat prompts (HumanEval's first problems, our chat set)."""
    code, chat = humaneval()[:10], CHAT_PROMPTS[:10]
    return [p for pair in zip(code, chat) for p in pair]


def fresh_adapter(session) -> str:
    """Publish version 1 for the session's pair: a LoRA adapter whose B matrices are zero (the
    drafter unchanged) and an untrained acceptance head."""
    from omnidraft.models.acceptance import AcceptanceHead
    from omnidraft.train.trainer import TrainConfig, attach_lora

    if session.base is not None:
        base = copy.deepcopy(session.base.model)
    else:  # the drafter runs as a program: the adapter is made on the eager model
        from omnidraft.models.loading import load_model

        base = load_model(session.spec.drafter, dtype="fp32").model
    model = attach_lora(base, TrainConfig())
    head = AcceptanceHead(base.config.hidden_size)
    return session.store.publish(session.spec.name, model, meta={"fresh": True, "records_through": 0},
                                 extra={"head": head.state_dict()})


def measure(session, prompts: list[str], *, max_new_tokens: int, ar: bool, say, budget_s: float | None = None,
            label: str = "calibrating", llamacpp: LlamaCppAlone | None = None) -> dict:
    """Run prompts through the session (and the target alone when ``ar``; an engine's own
    generation when the target is an OpenAI-API one; the target alone on ``llamacpp`` when given),
    interleaved per prompt. Whole-generation and decode-only (prefill excluded) tokens/s for the
    pair and the target alone; whole-generation for llama.cpp (it reports no prefill time)."""
    import statistics

    from omnidraft.decode.generate import generate_ar
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.lm import same_start

    engine = getattr(session.target, "generate_alone", None)  # an OpenAI-API target's engine
    t0 = time.perf_counter()
    tot = {"tokens": 0, "wall": 0.0, "decode": 0.0, "proposed": 0, "accepted": 0, "ar_tokens": 0, "ar_wall": 0.0,
           "ar_decode": 0.0, "prompts": 0, "forwards": 0, "llamacpp_tokens": 0, "llamacpp_wall": 0.0}
    translate: list[float] = []
    for n, p in enumerate(prompts):
        if budget_s is not None and n and time.perf_counter() - t0 > budget_s:
            break
        session.new_conversation()  # unrelated prompts: none copies from another's answer
        again = same_start(session.target, session.drafter)  # the target alone does not find the pair's prompt
        m = session.generate(p, max_new_tokens=max_new_tokens).metrics
        tot["tokens"] += m["new_tokens"]
        tot["wall"] += m["wall_s"]
        tot["decode"] += m["wall_s"] - m["prefill_s"]
        drafted = m.get("rounds_by_kind", {}).get("drafter", {"proposed": 0, "accepted": 0})
        tot["proposed"] += drafted["proposed"]  # the drafter's acceptance, not the copies'
        tot["accepted"] += drafted["accepted"]
        tot["forwards"] += m["target_forwards"]
        if m["translate_ms_median"] is not None and m["proposed"]:
            translate.append(m["translate_ms_median"])
        if ar:
            again()
            a = generate_ar(session.target, session.target_tok, p, max_new_tokens=max_new_tokens).metrics
            tot["ar_tokens"] += a["new_tokens"]
            tot["ar_wall"] += a["wall_s"]
            tot["ar_decode"] += a["wall_s"] - a["prefill_s"]
        elif engine is not None:
            alone = engine(encode_prompt(session.target_tok, p, chat=False), max_new_tokens)
            tot["ar_tokens"] += alone.tokens
            tot["ar_wall"] += alone.seconds
        if llamacpp is not None:
            n_llama, s_llama = llamacpp(encode_prompt(session.target_tok, p, chat=False), max_new_tokens)
            tot["llamacpp_tokens"] += n_llama
            tot["llamacpp_wall"] += s_llama
        tot["prompts"] += 1
        say(f"\r{label} {_bar(n + 1, len(prompts), t0)}", end="")
    say("")
    out = {"prompts": tot["prompts"], "proposed": tot["proposed"], "accepted": tot["accepted"],
           "acceptance_rate": round(tot["accepted"] / max(tot["proposed"], 1), 4),
           "tokens_per_s": round(tot["tokens"] / max(tot["wall"], 1e-9), 3),
           "decode_tokens_per_s": round(tot["tokens"] / max(tot["decode"], 1e-9), 3),
           "tokens_per_target_forward": round(tot["tokens"] / max(tot["forwards"], 1), 3),
           "translate_ms": round(statistics.median(translate), 3) if translate else 0.0}
    if tot["ar_wall"]:
        out["ar_tokens_per_s"] = round(tot["ar_tokens"] / tot["ar_wall"], 3)
        out["speedup"] = round(out["tokens_per_s"] / out["ar_tokens_per_s"], 3)
    if tot["llamacpp_wall"]:
        out["llamacpp_tokens_per_s"] = round(tot["llamacpp_tokens"] / tot["llamacpp_wall"], 3)
        out["vs_llamacpp"] = round(out["tokens_per_s"] / out["llamacpp_tokens_per_s"], 3)
    if ar and tot["ar_wall"]:
        out["ar_decode_tokens_per_s"] = round(tot["ar_tokens"] / max(tot["ar_decode"], 1e-9), 3)
    return out


def pair(target: str, drafter: str = DEFAULT_DRAFTER, *, reset: bool = False, calibration_s: float = 120.0,
         max_new_tokens: int = 48, token: str | None = None, target_tokenizer: str | None = None,
         target_model: str | None = None, target_context: int = 2048, target_engine: str | None = None,
         say: Callable[..., None] | None = None, session=None, llamacpp: bool = True,
         engine: str | None = None) -> dict:
    """Pair ``drafter`` with ``target``: build their ExecuTorch programs when missing (a given
    ``session`` runs on what it loaded), measure the cost model, and calibrate for about
    ``calibration_s`` seconds, beside the target alone and (``llamacpp``, when llama-cpp-python is
    installed and the target has a GGUF) the target alone on llama.cpp. ``engine="llamacpp"``: the
    session hands generations to llama.cpp while it is measured faster than the pair (the
    calibration measures both)."""
    from omnidraft.pairs import programs
    from omnidraft.session import Session

    say = say or (lambda *a, **k: print(*a, file=sys.stderr, flush=True, **k))
    if session is None:  # a bad engine is refused before the programs are built
        check_engine(engine, target, remote=is_remote(target), greedy=True, progress=say)
    built = {} if session is not None else programs.ensure(drafter, target, say=say)
    say(f"pairing {drafter} with {target} ...")
    session = session or Session(drafter, target, token=token, target_tokenizer=target_tokenizer,
                                 target_model=target_model, target_context=target_context,
                                 target_engine=target_engine, engine=engine)
    name = session.spec.name
    if reset:
        for v in session.store.versions(name):
            session.store.delete(name, v)
        (pair_dir(name) / "cursor.json").unlink(missing_ok=True)
        session.version = None
    kept = session.store.latest(name)
    if kept is None:
        fresh_adapter(session)
    session.refresh()
    vmap = session.pair.vmap
    direct = int((vmap.d2t >= 0).sum())
    report = {"pair": name, "drafter": drafter, "target": target, "adapter": session.version,
              "runtimes": {"drafter": session.drafter_runtime, "target": session.target_runtime},
              "programs_built": built,
              "kept_trained_adapter": kept is not None,
              "vocabulary": {"drafter": len(vmap.d2t), "target": len(vmap.t2d), "shared": direct,
                             "shared_of_drafter": round(direct / len(vmap.d2t), 4),
                             "shared_of_target": round(direct / len(vmap.t2d), 4)},
              "ngrams": {"seeded": session.pair.cache.seeded, "learned": session.pair.cache.learned}}
    if calibration_s > 0:
        prompts = builtin_prompts()
        dl = session.draft_length
        if isinstance(dl, CostModelK):  # first acceptance at a fixed k, then the model decides
            with dl.fixed(ACCEPTANCE_K):
                first = measure(session, prompts[:ACCEPTANCE_PROMPTS], max_new_tokens=max_new_tokens, ar=False,
                                say=say, budget_s=calibration_s / 2, label=f"measuring acceptance (k={ACCEPTANCE_K})")
            dl.model.translate_ms = first["translate_ms"]
            prompts = prompts[ACCEPTANCE_PROMPTS:]
            report["cost_model"] = {**dl.state(), "verify_ms": dl.model.verify_ms, "drafter_ms": dl.model.drafter_ms,
                                    "translate_ms": dl.model.translate_ms, "on": session.cost_on}
            session.save_cost()
        llama = baseline(session, say) if llamacpp or session.engine is not None else None
        with session.pair_only():
            report["calibration"] = c = measure(session, prompts, max_new_tokens=max_new_tokens,
                                                ar=not session.spec.remote, say=say, budget_s=calibration_s / 2,
                                                llamacpp=llama)
        choice = session.engine_choice
        alone = c.get("llamacpp_tokens_per_s" if isinstance(session.engine, LlamaCppAlone) else "ar_tokens_per_s")
        if choice is not None and alone:
            choice.measured(c["tokens_per_s"], alone)
            report["engine"] = {"pair_tokens_per_s": choice.pair_tokens_per_s,
                                "engine_tokens_per_s": choice.engine_tokens_per_s, "hands_over": choice.engine_now()}
    return report


def baseline(session, say) -> LlamaCppAlone | None:
    """The target alone on llama.cpp: the session's own engine, else one for a local target (a
    remote one is compared with its own engine), stopping where the target alone stops; None
    after one line saying why there is no llama.cpp row."""
    from omnidraft.decode.text import model_eos_ids, stop_ids

    if isinstance(session.engine, LlamaCppAlone):
        return session.engine
    if session.spec.remote:
        return None
    try:
        return llamacpp_engine(session.spec.target, stop_ids(session.target_tok, model_eos_ids(session.target)),
                               session.target_tok, say)
    except OmniDraftError as e:
        say(f"{e}: no llama.cpp row")
        return None


def format_report(r: dict) -> str:
    v, g = r["vocabulary"], r["ngrams"]
    lines = [f"pair {r['pair']}: adapter {r['adapter']}" + (" (kept; --reset starts over)" if r["kept_trained_adapter"] else " (fresh)"),
             f"  vocabulary: drafter {v['drafter']}, target {v['target']}, shared {v['shared']} "
             f"({v['shared_of_drafter']:.1%} of the drafter's, {v['shared_of_target']:.1%} of the target's)",
             f"  n-gram cache: {g['seeded']} seeded, {g['learned']} learned",
             f"  runtimes: drafter {r['runtimes']['drafter']}, target {r['runtimes']['target']}"]
    cm = r.get("cost_model")
    if cm:
        lines += format_cost_model(cm)
    c = r.get("calibration")
    if c:
        drafts = f"acceptance {c['acceptance_rate']:.3f}" if c["proposed"] else "no drafts (the target alone)"
        line = (f"  calibration on {c['prompts']} prompts: {drafts}, "
                f"{c['tokens_per_target_forward']:.2f} tokens per target forward, {c['tokens_per_s']:.2f} tokens/s")
        if "ar_tokens_per_s" in c:
            line += f" vs target alone {c['ar_tokens_per_s']:.2f} tokens/s ({c['speedup']:.2f}x)"
        if "llamacpp_tokens_per_s" in c:
            line += f", vs llama.cpp alone {c['llamacpp_tokens_per_s']:.2f} tokens/s ({c['vs_llamacpp']:.2f}x)"
        lines.append(line)
        if r["runtimes"]["target"] == "remote" and c.get("speedup", 1.0) < 1.0:
            lines.append("  the engine generating alone is faster than the pair through its API on this server: "
                         "a Session lets it generate (re-trying the pair every few generations)")
        elif r.get("engine", {}).get("hands_over") and r["runtimes"]["target"] != "remote":
            lines.append("  llama.cpp alone is faster than the pair here: a Session(engine=\"llamacpp\") hands it "
                         f"generations (its own greedy output of the GGUF), re-trying the pair every {PROBE_EVERY}")
        elif c.get("vs_llamacpp", 1.0) < 1.0 and "engine" not in r:
            lines.append("  llama.cpp alone is faster than the pair here: --engine llamacpp / "
                         "Session(engine=\"llamacpp\") hands it generations while it is measured faster")
        if cm:
            err = c["decode_tokens_per_s"] / max(cm["predicted_tokens_per_s"], 1e-9) - 1
            lines.append(f"  decoding (prefill excluded): measured {c['decode_tokens_per_s']:.2f} tokens/s, "
                         f"the cost model predicted {cm['predicted_tokens_per_s']:.2f} ({err:+.0%})")
    return "\n".join(lines)


def format_cost_model(cm: dict) -> list[str]:
    """The cost model's reading of this machine, and its choice."""
    v = {int(w): ms for w, ms in cm["verify_ms"].items()}
    ratios = " ".join(f"{v[w] / v[1]:.2f}" for w in sorted(v) if w > 1)
    acc = " ".join(f"{a:.2f}" for a in cm["position_acceptance"][:8]) or "not measured"
    lines = [f"  cost model ({cm['on']['cpu']}, {cm['on']['threads']} threads): target {v[1]:.1f} ms per token, "
             f"verifying n = {', '.join(str(w) for w in sorted(v) if w > 1)} tokens costs {ratios} x one; "
             f"drafter {cm['drafter_ms']:.1f} ms per token; acceptance by draft position {acc}"]
    alone = cm["target_alone_tokens_per_s"]
    if cm["k"]:
        lines.append(f"  -> drafting k = {cm['k']} per round: predicted {cm['predicted_tokens_per_s']:.1f} tokens/s "
                     f"decoding vs {alone:.1f} for the target alone ({cm['predicted_tokens_per_s'] / alone:.2f}x)")
    else:
        lines.append(f"  -> the target alone ({alone:.1f} tokens/s): no draft length is predicted to be at least "
                     f"5% faster on this machine (the best, k = {cm['best_k']}, "
                     f"{cm['best_k_tokens_per_s'] / alone:.2f}x); the drafter is re-tried every few generations")
    return lines
