"""`omnidraft pair` as a library function: pair a drafter with a target (vocabulary map, seeded
n-grams, a fresh adapter and head), calibrate on built-in prompts beside the target alone and
llama.cpp alone (when installed: compare.py), and report.
Knows the Session and the prompts; nothing about training rounds (the demo's, demo.py);
printing is the caller's (``say``).
"""

from __future__ import annotations

import copy
import sys
from typing import Callable

from omnidraft.decode.draft_length import CostModelK
from omnidraft.errors import OmniDraftError
from omnidraft.jobs import runtimes
from omnidraft.jobs.compare import measure
from omnidraft.pairs.llamacpp import LlamaCppAlone, llamacpp_engine
from omnidraft.pairs.runtime_choice import keep, resolve, settle
from omnidraft.pairs.settings import TargetRef
from omnidraft.pairs.spec import DEFAULT_DRAFTER, adapter_store, pair_dir, pair_name
from omnidraft.prompts import CHAT_PROMPTS, humaneval

ACCEPTANCE_K = 5  # draft length while pairing measures acceptance per position
ACCEPTANCE_PROMPTS = 6  # prompts (at most) for that, before the calibration proper


def builtin_prompts() -> list[str]:
    """Alternating code and chat prompts (HumanEval's first problems, our chat set)."""
    code, chat = humaneval()[:10], CHAT_PROMPTS[:10]
    return [p for pair in zip(code, chat) for p in pair]


def first_adapter(store, name: str, drafter: str, base=None) -> str:
    """Publish pair ``name``'s first version in ``store``: the pre-adapted adapter the package
    ships for it (adapters/shipped.py), else a fresh one (``fresh_adapter``)."""
    from omnidraft.adapters import shipped

    return shipped.install(store, name) or fresh_adapter(store, name, drafter, base)


def fresh_adapter(store, name: str, drafter: str, base=None) -> str:
    """Publish pair ``name``'s next version: a LoRA adapter whose B matrices are zero (the drafter
    unchanged) and an untrained acceptance head, made on a copy of ``base`` (the drafter's eager
    model) or, without one, on ``drafter`` loaded eager."""
    from omnidraft.models.acceptance import AcceptanceHead
    from omnidraft.train.trainer import TrainConfig, attach_lora

    if base is not None:
        base = copy.deepcopy(base)
    else:
        from omnidraft.models.loading import load_model

        base = load_model(drafter, dtype="fp32").model
    model = attach_lora(base, TrainConfig())
    head = AcceptanceHead(base.config.hidden_size)
    return store.publish(name, model, meta={"fresh": True, "records_through": 0}, extra={"head": head.state_dict()})


def forget_adapters(name: str) -> None:
    """Every adapter version of pair ``name``, the .ptd files made of them, and the training
    cursor: the pair starts over (its log is kept)."""
    import shutil

    store = adapter_store()
    for v in store.versions(name):
        store.delete(name, v)
    shutil.rmtree(pair_dir(name) / "executorch", ignore_errors=True)
    (pair_dir(name) / "cursor.json").unlink(missing_ok=True)


def pair(target: str | TargetRef, drafter: str = DEFAULT_DRAFTER, *, reset: bool = False,
         calibration_s: float = 40.0, max_new_tokens: int = 48, say: Callable[..., None] | None = None,
         session=None, llamacpp: bool = True, target_runtime: str = "auto", exact: bool = False) -> dict:
    """Pair ``drafter`` with ``target`` (a name, path or URL, or a TargetRef with a server's
    token and tokenizer): build their ExecuTorch programs when missing (not the target's with
    ``target_runtime="llamacpp"``: its GGUF runs as it is), measure the cost model, and with
    ``auto`` the target's runtimes against each other (runtimes.py; a near tie settled by the
    calibration, pairs/runtime_choice.py; only bit-exact ones with ``exact``), then calibrate for
    about ``calibration_s`` seconds beside the target alone and (``llamacpp``, when
    llama-cpp-python is installed and the target has a GGUF) the target alone on llama.cpp. A
    ``target_runtime`` other than ``auto`` is kept for ``auto`` on this machine. The pair's first
    adapter is published before its Session opens (the drafter's program loads once, with it); a
    given ``session`` runs on what it loaded."""
    from omnidraft.pairs import programs
    from omnidraft.pairs.settings import Runtime
    from omnidraft.session import Session

    say = say or (lambda *a, **k: print(*a, file=sys.stderr, flush=True, **k))
    target = target if isinstance(target, TargetRef) else TargetRef(target)
    resolve(None, target_runtime, exact)  # an inexact runtime asked with exact: refused before any export
    built = {} if session is not None else programs.ensure(drafter, target.ref, say=say,
                                                           target_program=target_runtime != "llamacpp")
    say(f"pairing {drafter} with {target.ref} ...")
    owned = session is None
    if owned:  # before the session loads the drafter: it loads the first version, its program once
        name, store = pair_name(drafter, target.ref), adapter_store()
        if reset:
            forget_adapters(name)
        if store.latest(name) is None:
            first_adapter(store, name, drafter)
    session = session or Session(drafter, target, runtime=Runtime(target=target_runtime, cache_ram_mib=0), exact=exact,
                                 route=False, memory=False)  # each runtime measured on its own: no recall, no restore
    name = session.spec.name
    if session.store.latest(name) is None:  # a given session's pair
        first_adapter(session.store, name, session.spec.drafter,
                      None if session.base is None else session.base.model)
    session.refresh()
    latest = session.store.list(name)[-1]
    start = "pre-adapted" if latest.get("pre_adapted") else "fresh" if latest.get("fresh") else "kept"
    vmap = session.pair.vmap
    direct = int((vmap.d2t >= 0).sum())
    report = {"pair": name, "drafter": drafter, "target": target.ref, "adapter": session.version,
              "runtimes": {"drafter": session.drafter_runtime, "target": session.target_runtime},
              "programs_built": built,
              "adapter_start": start,  # kept (trained here), pre-adapted (shipped) or fresh
              "vocabulary": {"drafter": len(vmap.d2t), "target": len(vmap.t2d), "shared": direct,
                             "shared_of_drafter": round(direct / len(vmap.d2t), 4),
                             "shared_of_target": round(direct / len(vmap.t2d), 4)},
              "ngrams": {"seeded": session.pair.cache.seeded, "learned": session.pair.cache.learned}}
    if calibration_s > 0:
        prompts = builtin_prompts()
        dl = session.draft_length
        if isinstance(dl, CostModelK):  # first acceptance at a fixed k, then the model decides
            with dl.fixed(ACCEPTANCE_K), session.pair_only():
                first = measure(session, prompts[:ACCEPTANCE_PROMPTS], max_new_tokens=max_new_tokens, ar=False,
                                say=say, budget_s=calibration_s / 2, label=f"measuring acceptance (k={ACCEPTANCE_K})")
            dl.model.translate_ms = first["translate_ms"]
            prompts = prompts[ACCEPTANCE_PROMPTS:]
            session.save_cost()
            if target_runtime == "auto" and not target.remote:
                report["runtimes"]["compared"] = compared = runtimes.compare(session, exact, say)
                if owned and compared["chosen"] != session.target_runtime:
                    session = _reopen(session, drafter, target, compared["chosen"])
                    report["runtimes"]["target"] = session.target_runtime
            report["cost_model"] = _cost_model(session)
        report["calibration"] = c = _calibrate(session, prompts, llamacpp, max_new_tokens, calibration_s, say)
        compared = report["runtimes"].get("compared")
        if compared:  # the measurement settles what the predictions left open (runtime_choice.py)
            vs = c.get("vs_llamacpp")
            compared["calibrated_on"], compared["measured_vs_llamacpp"] = session.target_runtime, vs
            compared["chosen"] = settle(name, compared["predicted_tokens_per_s"], session.target_runtime, vs)
            if owned and compared["chosen"] != session.target_runtime:
                say(f"the pair on {session.target_runtime} ran {vs:.2f}x llama.cpp alone: the target goes to "
                    f"{compared['chosen']}")
                session = _reopen(session, drafter, target, compared["chosen"])
                report["runtimes"]["target"] = session.target_runtime
                report["cost_model"] = _cost_model(session)
                report["calibration"] = c = _calibrate(session, prompts, llamacpp, max_new_tokens, calibration_s, say)
        choice = session.engine_choice  # an OpenAI-API target's engine: the pair against it alone
        if choice is not None and c.get("ar_tokens_per_s"):
            choice.measured(c["tokens_per_s"], c["ar_tokens_per_s"])
            report["engine"] = {"pair_tokens_per_s": choice.pair_tokens_per_s,
                                "engine_tokens_per_s": choice.engine_tokens_per_s, "hands_over": choice.engine_now()}
    if target_runtime != "auto" and not target.remote:  # the runtime named here is what `auto` runs after it
        cm, c = report.get("cost_model"), report.get("calibration")
        keep(name, session.target_runtime, {session.target_runtime: cm["predicted_tokens_per_s"]} if cm else {},
             session.target_runtime if c else None, (c or {}).get("vs_llamacpp"))
        report["runtimes"]["kept"] = session.target_runtime
    return report


def _reopen(session, drafter: str, target: TargetRef, runtime: str):
    """The pair's session again with its target on ``runtime`` (the old one closed first: memory)."""
    from omnidraft.pairs.settings import Runtime
    from omnidraft.session import Session

    session.close()
    return Session(drafter, target, runtime=Runtime(target=runtime, cache_ram_mib=0), memory=False)


def _cost_model(session) -> dict:
    dl = session.draft_length
    return {**dl.state(), "verify_ms": dl.model.verify_ms, "drafter_ms": dl.model.drafter_ms,
            "translate_ms": dl.model.translate_ms, "on": session.route.cost.on}


def _calibrate(session, prompts: list[str], llamacpp: bool, max_new_tokens: int, calibration_s: float, say) -> dict:
    """The pair beside the target alone and (``llamacpp``, off llama.cpp) llama.cpp alone, interleaved."""
    # on llama.cpp the target alone is llama.cpp alone: no second copy of the GGUF
    llama = baseline(session, say) if llamacpp and session.target_runtime != "llamacpp" else None
    with session.pair_only():
        return measure(session, prompts, max_new_tokens=max_new_tokens, ar=not session.spec.remote, say=say,
                       budget_s=calibration_s / 2, llamacpp=llama)


def baseline(session, say) -> LlamaCppAlone | None:
    """The target alone on llama.cpp for a local target (a remote one is compared with its own
    engine), stopping where the target alone stops; None after one line saying why there is no
    llama.cpp row."""
    from omnidraft.decode.text import stop_ids

    if session.spec.remote:
        return None
    try:
        return llamacpp_engine(session.spec.target, stop_ids(session.target_tok, session.target.eos_ids),
                               session.target_tok, say, n_ctx=session.target.max_length)
    except OmniDraftError as e:
        say(f"{e}: no llama.cpp row")
        return None


def format_report(r: dict) -> str:
    v, g = r["vocabulary"], r["ngrams"]
    start = {"kept": " (kept; --reset starts over)", "pre-adapted": " (pre-adapted to this target, shipped with "
             "OmniDraft)", "fresh": " (fresh)"}[r["adapter_start"]]
    lines = [f"pair {r['pair']}: adapter {r['adapter']}{start}",
             f"  vocabulary: drafter {v['drafter']}, target {v['target']}, shared {v['shared']} "
             f"({v['shared_of_drafter']:.1%} of the drafter's, {v['shared_of_target']:.1%} of the target's)",
             f"  n-gram cache: {g['seeded']} seeded, {g['learned']} learned",
             f"  runtimes: drafter {r['runtimes']['drafter']}, target {r['runtimes']['target']}"
             + (" (kept for this machine: --target-runtime auto runs it)" if r["runtimes"].get("kept") else "")]
    compared = r["runtimes"].get("compared")
    if compared and len(compared["predicted_tokens_per_s"]) > 1:
        lines.append("  target runtimes on this CPU: " + "; ".join(
            f"{rt} {compared['one_token_ms'][rt]:.1f} ms a token, the pair predicted {tps:.1f} tokens/s at k = "
            f"{compared['k'][rt]}" for rt, tps in compared["predicted_tokens_per_s"].items())
            + f" -> {compared['chosen']}{_settled(compared)} (kept for this machine: --target-runtime auto runs it"
            + (", each generation on it or the program, whichever is predicted to end it first: a long prompt reads "
               "far faster on the program)" if compared["chosen"] == "llamacpp" and "executorch" in
               compared["predicted_tokens_per_s"] else ")"))
    cm = r.get("cost_model")
    if cm:
        lines += format_cost_model(cm)
    c = r.get("calibration")
    if c:
        drafts = f"acceptance {c['acceptance_rate']:.3f}" if c["proposed"] else "no drafts (the target alone)"
        line = (f"  calibration on {c['prompts']} prompts: {drafts}, "
                f"{c['tokens_per_target_forward']:.2f} tokens per target forward, {c['tokens_per_s']:.2f} tokens/s")
        if "ar_tokens_per_s" in c:
            alone = "llama.cpp alone (one token a call)" if r["runtimes"]["target"] == "llamacpp" else "target alone"
            line += f" vs {alone} {c['ar_tokens_per_s']:.2f} tokens/s ({c['speedup']:.2f}x)"
        if "llamacpp_tokens_per_s" in c:
            line += f", vs llama.cpp alone {c['llamacpp_tokens_per_s']:.2f} tokens/s ({c['vs_llamacpp']:.2f}x)"
        lines.append(line)
        if r["runtimes"]["target"] == "remote" and c.get("speedup", 1.0) < 1.0:
            lines.append("  the engine generating alone is faster than the pair through its API on this server: "
                         "a Session lets it generate (re-trying the pair every few generations)")
        elif c.get("vs_llamacpp", 1.0) < 1.0 and r["runtimes"]["target"] != "llamacpp":
            lines.append("  llama.cpp alone is faster than the pair here: --target-runtime llamacpp verifies on the "
                         "GGUF with llama.cpp (`omnidraft cost --target-runtime llamacpp` measures it)")
        if cm:
            err = c["decode_tokens_per_s"] / max(cm["predicted_tokens_per_s"], 1e-9) - 1
            lines.append(f"  decoding (prefill excluded): measured {c['decode_tokens_per_s']:.2f} tokens/s, "
                         f"the cost model predicted {cm['predicted_tokens_per_s']:.2f} ({err:+.0%})")
    return "\n".join(lines)


def _settled(compared: dict) -> str:
    """How the calibration settled the choice, when it measured the pair against llama.cpp alone."""
    vs = compared.get("measured_vs_llamacpp")
    if vs is None:
        return ""
    verdict = "kept" if compared["chosen"] == compared["calibrated_on"] else "not kept"
    return f", the pair on {compared['calibrated_on']} measured {vs:.2f}x llama.cpp alone: {verdict}"


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
