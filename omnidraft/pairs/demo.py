"""`omnidraft demo` as a library function: pair the default drafter with Qwen2.5-Coder-0.5B,
stream a few prompts, run one training round on what was logged, and compare before and after.
Knows the Session, the tuning round and the pairing job (calibrate.py); printing is the
caller's (``say``).
"""

from __future__ import annotations

import sys
from typing import Callable

from omnidraft.pairs.calibrate import builtin_prompts, format_report, measure, pair
from omnidraft.pairs.spec import DEFAULT_DRAFTER


def demo(*, prompts: int = 4, max_new_tokens: int = 48, calibration_s: float = 60.0,
         say: Callable[..., None] | None = None) -> dict:
    """The README's main job: pair SmolLM2-135M with Qwen2.5-Coder-0.5B, stream a few prompts,
    run one training round on what was logged, and compare acceptance and tokens/s."""
    from omnidraft.models.loading import load_model
    from omnidraft.session import Session
    from omnidraft.train.trainer import TrainConfig
    from omnidraft.train.tuning import RoundConfig, run_round

    say = say or (lambda *a, **k: print(*a, flush=True, **k))
    session = Session(DEFAULT_DRAFTER, "qwen2.5-coder-0.5b")
    report = pair("qwen2.5-coder-0.5b", session=session, calibration_s=calibration_s,
                  max_new_tokens=max_new_tokens, say=lambda *a, **k: print(*a, file=sys.stderr, flush=True, **k))
    say(format_report(report))
    shown = builtin_prompts()[:prompts]
    tot = {"tokens": 0, "wall": 0.0, "proposed": 0, "accepted": 0}
    for p in shown:
        say(f"\n>>> {p.strip()[:70]}")
        for text in session.stream(p, max_new_tokens=max_new_tokens):
            say(text, end="")
        m = session.last.metrics
        for k, src in (("tokens", "new_tokens"), ("wall", "wall_s"), ("proposed", "proposed"), ("accepted", "accepted")):
            tot[k] += m[src]
        say(f"\n[{m['acceptance_rate']:.3f} acceptance, {m['tokens_per_s']:.2f} tokens/s]")
    before = {"prompts": len(shown), "acceptance_rate": round(tot["accepted"] / max(tot["proposed"], 1), 4),
              "tokens_per_s": round(tot["tokens"] / max(tot["wall"], 1e-9), 3)}
    say("\none training round on the logged verifications ...")
    cfg = RoundConfig(min_records=2, train=TrainConfig(update_interval=2, batch_size=2))
    result = run_round(session.spec, session.log, session.store, load_model(DEFAULT_DRAFTER, dtype="fp32").model,
                       cfg, progress=lambda m: say(f"\r  {m}", end=""))
    if result["status"] == "waiting":
        say(f"\n  round: waiting for records ({result['new_records']} new, {cfg.min_records} needed)")
    say(f"\n  round: {result['status']}" + (f" {result.get('version', '')}" if result["status"] == "published" else "")
        + (f" (held-out teacher-forced acceptance {result['acceptance_before']:.3f} -> {result['acceptance_after']:.3f})"
           if result.get("held_out") else ""))
    after = measure(session, shown, max_new_tokens=max_new_tokens, ar=False, say=say, label="after training")
    say(f"before training: acceptance {before['acceptance_rate']:.3f}, {before['tokens_per_s']:.2f} tokens/s")
    say(f"after  training: acceptance {after['acceptance_rate']:.3f}, {after['tokens_per_s']:.2f} tokens/s "
        f"(adapter {session.version})")
    return {"pair": report, "round": result, "before": before, "after": after}
