"""What `omnidraft serve` and `omnidraft generate` do first with a pair nobody has paired on this
machine: pair it (`omnidraft pair`: its ExecuTorch programs, cost model and target runtime, with
the same progress lines), rather than run both models silently on eager PyTorch, which is slow
and only exact with respect to the logits its calls compute (pairs/build.py ``exactness``). With
the target alone, its program is built. Only for the catalog's models (a model folder of the
user's own, as the tests' tiny ones, runs as asked, its log saying how); a runtime the caller
named (``eager`` included) and a server's target run as asked.

Knows when a pair counts as paired here; nothing about serving or generating.
"""

from __future__ import annotations

from typing import Callable

from omnidraft.models.catalog import CATALOG
from omnidraft.pairs import programs
from omnidraft.pairs.runtime_choice import load as load_choice
from omnidraft.pairs.runtime_choice import machine
from omnidraft.pairs.settings import Runtime, TargetRef
from omnidraft.pairs.spec import pair_name


def needs_pairing(drafter: str | None, target: TargetRef, runtime: Runtime) -> bool:
    """Whether ``drafter`` (None: the target alone) and ``target`` on ``runtime`` would load
    something `omnidraft pair` has not built or measured here: a program missing, or (a pair) no
    target runtime chosen on this CPU and thread count. Only where both runtimes are ``auto``."""
    if target.ref not in CATALOG or runtime.target != "auto":
        return False
    if drafter is None:
        return bool(programs.missing(None, target.ref))
    if runtime.drafter != "auto" or drafter not in CATALOG:
        return False
    kept = load_choice(pair_name(drafter, target.ref))
    return bool(programs.missing(drafter, target.ref)) or kept is None or kept.get("on") != machine()


def prepare(drafter: str | None, target: TargetRef, runtime: Runtime, exact: bool,
            say: Callable[..., None]) -> dict | None:
    """Pair (or build the target alone's program) where ``needs_pairing`` says so, saying each
    stage through ``say``; what `omnidraft pair` reported, or None where nothing was needed."""
    if not needs_pairing(drafter, target, runtime):
        return None
    if drafter is None:
        say(f"{target.ref} has no ExecuTorch program here: building it once before serving")
        return {"programs_built": programs.ensure(None, target.ref, say=say)}
    from omnidraft.jobs.pairing import pair

    say(f"{drafter} + {target.ref} is not paired on this machine: pairing it first (`omnidraft pair`: the "
        "programs, the cost model, the target's runtime; a few minutes, once)")
    return pair(target, drafter, say=say, exact=exact)
