"""The target's runtimes measured against each other, for `omnidraft pair`: each runtime this
machine can load (the ExecuTorch program when exported, the GGUF on llama.cpp when the extra is
installed, and the one the session runs, timed again) timed at every verify width in one
sitting, given the drafter's cost and the acceptance the pairing just measured: which one the
pairing calibrates on (pairs/runtime_choice.py: the fastest prediction, or the bit-exact program
where llama.cpp's lead is within the predictions' error). Each runtime's cost model is saved with
the acceptance counts, so a session on either starts from them.

Knows the cost model, the target loaders and the choice's file; printing is the caller's.
"""

from __future__ import annotations

from typing import Callable

from omnidraft.errors import OmniDraftError
from omnidraft.pairs import timing
from omnidraft.pairs.build import local_target
from omnidraft.pairs.cost_store import CostRecord, cost_file, write
from omnidraft.pairs.runtime_choice import INEXACT, first_choice

CANDIDATES = ("executorch", "llamacpp")


def compare(session, exact: bool, say: Callable[..., None]) -> dict:
    """{"predicted_tokens_per_s": {runtime: tokens/s}, "k": {runtime: the k chosen there},
    "one_token_ms": {runtime: ms}, "chosen": the runtime to calibrate on} for the session's target
    (a local one whose cost model and acceptance the session holds)."""
    dl = session.draft_length
    say(f"timing the target on {session.target_runtime} ...")  # again: a timing saved earlier may be stale
    dl.model = dl.model.retimed(timing.measure(session.target_model, None, timing.WIDTHS, reps=timing.REPS))
    dl.reestimate()
    session.save_cost()
    models = {session.target_runtime: dl.model}
    for runtime in CANDIDATES:
        if runtime in models or (exact and runtime in INEXACT):
            continue
        try:
            lm = local_target(session.spec.target, runtime, dtype=session.runtime.dtype)
        except OmniDraftError as err:
            say(f"target on {runtime}: not compared ({err.problem})")
            continue
        say(f"timing the target on {runtime} ...")
        timed = timing.measure(lm, None, timing.WIDTHS, reps=timing.REPS)
        models[runtime] = dl.model.retimed(timed)  # the same drafter and translation
        on = timing.measured_on(timing.runtime_name(lm, session.runtime.dtype),
                                timing.runtime_name(session.drafter, "fp32"))
        write(cost_file(session.spec.name, on["target_runtime"]), CostRecord(models[runtime], dl.reached, dl.accepted, on))
        del lm
    rates = dl.rates()
    chosen = {runtime: model.choose(rates, dl.k_max) for runtime, model in models.items()}
    predicted = {runtime: tps for runtime, (_k, tps) in chosen.items()}
    return {"predicted_tokens_per_s": {r: round(v, 3) for r, v in predicted.items()},
            "k": {runtime: k for runtime, (k, _tps) in chosen.items()},
            "one_token_ms": {runtime: model.verify_ms[1] for runtime, model in models.items()},
            "chosen": first_choice(predicted)}
