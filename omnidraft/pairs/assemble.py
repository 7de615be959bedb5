"""A Session's parts, built in the order they need each other: the drafter with the adapter it
should run (pairs/drafter.py) and the pair's spec; the target on its runtime with its tokenizer
(pairs/build.py); the pair's vocabulary map and n-gram cache; the cost model of each target
runtime (pairs/cost_store.py: measured on first use, kept in the pair's folder); and the routes
its generations take (pairs/router.py): the runtime loaded, beside it the other of the program
and llama.cpp where `omnidraft pair` timed both here (the program loaded first, llama.cpp when a
generation first runs on it: pairs/deferred.py), or an OpenAI-API engine with its hand-over to the
engine generating alone.

Knows how the parts are built; nothing about generating with them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from omnidraft.decode.draft_length import REMOTE_K, DraftLength, FixedK
from omnidraft.decode.target import LocalTarget
from omnidraft.errors import OmniDraftError
from omnidraft.models.budget import gib
from omnidraft.pairs.build import LLAMACPP_CONTEXT, load_target, local_target, resident_estimate, runtime_kind
from omnidraft.pairs.cost_store import for_pair, kept_for
from omnidraft.pairs.deferred import Deferred
from omnidraft.pairs.engine_choice import EngineChoice
from omnidraft.pairs.router import Router
from omnidraft.pairs.routing import Route
from omnidraft.pairs.runtime_choice import INEXACT
from omnidraft.pairs.runtime_choice import load as load_choice
from omnidraft.pairs.settings import Runtime, TargetRef
from omnidraft.pairs.spec import PairSpec, adapter_store, load_spec, pair_dir, save_spec
from omnidraft.sampling import SamplingConfig


@dataclass
class Parts:
    """What a Session runs: the pair's spec, drafter (PairDrafter), adapter store, drafter
    tokenizer and PairState (all None with the target alone), the target's tokenizer, and the router."""

    spec: PairSpec | None
    drafter: object | None
    store: object | None
    draft_tok: object | None
    pair: object | None
    target_tok: object
    router: Router


def assemble(drafter: str | None, target: TargetRef, *, fixed: DraftLength | None, sampling: SamplingConfig,
             verify: str, adapter: str, runtime: Runtime, exact: bool, route: bool, asked: str, note) -> Parts:
    """The parts for ``drafter`` (None: the target alone) and ``target`` on ``runtime`` (its target
    runtime resolved; ``asked``: the one the caller named). ``fixed``: the draft length the caller
    fixed (None: the cost model's; it also keeps generations off other routes and the engine)."""
    spec = pair = store = draft_tok = None
    both = route and asked == "auto" and fixed is None  # the router may keep both runtimes `omnidraft pair` timed
    if drafter is not None:
        spec, pair, store, draft_tok = _drafter(drafter, target, adapter, runtime, note)
        if spec.target_tokenizer and not target.tokenizer:
            target = replace(target, tokenizer=spec.target_tokenizer)  # what `omnidraft pair` kept
        if both and _program_first(spec, runtime):
            runtime = replace(runtime, target="executorch")
    tgt, target_tok = load_target(target, sampling=sampling, verify=verify, runtime=runtime, note=note, exact=exact)
    kind = "remote" if target.remote else runtime_kind(tgt.model)
    runtime.budget.require("the target" if drafter is None else "the pair",
                           "raise --max-memory, or take a smaller target" if drafter is None else
                           "raise --max-memory, or run the target alone (--drafter none)")
    if drafter is None:
        return Parts(None, None, None, None, None, target_tok, Router([Route(kind, tgt, FixedK(0))]))
    from omnidraft.remote.openai_api import OpenAITarget
    from omnidraft.translate.state import PairState

    state = PairState(draft_tok, target_tok, pair.lm.vocab_size, tgt.vocab_size, persist=True,
                      policy=runtime.ngram_policy,
                      max_bytes=None if runtime.ngram_policy == "unbounded" else runtime.ngram_mib << 20)
    save_spec(spec)  # the pair registered (again) once both models loaded
    cost = None
    if fixed is None and not target.remote:
        k, cost = for_pair(spec.name, tgt.model, pair.lm, runtime.dtype, progress=lambda s: note(f"cost model: {s}"))
    else:
        k = fixed or FixedK(REMOTE_K)
    routes = [Route(kind, tgt, k, cost)]
    if both and runtime.target != "auto":
        routes = _routes(routes[0], spec, pair.lm, runtime, exact, note)
    choice = None
    if isinstance(tgt, OpenAITarget) and fixed is None:  # a serving engine; not when k is fixed
        choice = EngineChoice.load(pair_dir(spec.name) / "engine.json")
    return Parts(spec, pair, store, draft_tok, state, target_tok, Router(routes, choice, note))


def _drafter(drafter: str, target: TargetRef, adapter: str, runtime: Runtime, note):
    """(the pair's spec, the drafter with the adapter it should run, the adapter store, its tokenizer)."""
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.build import load_drafter
    from omnidraft.pairs.drafter import PairDrafter, check_adapter

    spec = PairSpec(drafter, target.ref, target.tokenizer)
    try:  # keep what `omnidraft pair` recorded (e.g. the remote target's tokenizer)
        spec = load_spec(spec.name)
    except OmniDraftError:
        pass
    store = adapter_store()
    if adapter == "latest" and store.latest(spec.name) is None:  # aligned before the first prompt
        from omnidraft.adapters import shipped

        shipped.install(store, spec.name)
    check_adapter(adapter, store, spec.name)
    r = runtime
    lm = load_drafter(drafter, r.drafter, quant=r.quant, max_seq=r.max_seq, specvocab_k=r.specvocab_k, note=note)
    pair = PairDrafter(lm, drafter, spec.name, store, adapter)
    pair.refresh()
    return spec, pair, store, load_tokenizer(drafter)


def _program_first(spec: PairSpec, runtime: Runtime) -> bool:
    """Whether to load the target's program first where llama.cpp was kept to run first and both
    were timed here: the program is the one held from the start (it reads prompts far faster,
    keeps a cache per conversation slot where llama.cpp's one context is shared, is bit-exact, and
    takes seconds to load where llama.cpp's GGUF takes about one), and llama.cpp is loaded when the
    router first sends it a generation (pairs/deferred.py). Not where the budget cannot hold the
    program (llama.cpp then runs first, alone)."""
    timed = (load_choice(spec.name) or {}).get("predicted_tokens_per_s", {})
    if runtime.target != "llamacpp" or "executorch" not in timed:
        return False
    size = resident_estimate(spec.target, "executorch")
    return size > 0 and runtime.budget.allows(size)


def _routes(first: Route, spec: PairSpec, drafter, runtime: Runtime, exact: bool, note) -> list[Route]:
    """``first`` and the target on the other of the program and llama.cpp (not llama.cpp with
    ``exact``), the program first (ties go to it), when the other loads here within the memory
    budget and reads the same vocabulary; else ``first`` alone. llama.cpp beside the program is
    loaded when a generation first runs on it (pairs/deferred.py), where its cost model is kept."""
    other = {"executorch": "llamacpp", "llamacpp": "executorch"}.get(first.runtime)
    timed = (load_choice(spec.name) or {}).get("predicted_tokens_per_s", {})
    if other not in timed or (exact and other in INEXACT):  # only what `omnidraft pair` timed here
        return [first]
    budget = runtime.budget
    size = resident_estimate(spec.target, other)
    if budget.max_bytes is not None and not budget.allows(size):
        note(f"the target on {other} not loaded (~{gib(size)} would pass the memory budget): "
             f"every generation runs on {first.runtime}")
        return [first]
    load = partial(local_target, spec.target, other, dtype=runtime.dtype)
    tgt = first.target
    if other == "llamacpp" and (kept := kept_for(spec.name, "llama.cpp", drafter)) is not None:
        from omnidraft.device.llamacpp import LlamaCppLM

        lm = Deferred(load, LlamaCppLM, max_length=LLAMACPP_CONTEXT, size=size, budget=budget,
                      what=f"the target on {other}")
        return [first, Route(other, LocalTarget(lm, tgt.sampling, tgt.mode), *kept)]
    try:
        lm = load()
    except OmniDraftError:
        return [first]
    if lm.vocab_size != first.target.model.vocab_size:
        return [first]
    k, cost = for_pair(spec.name, lm, drafter, runtime.dtype, progress=lambda s: note(f"cost model: {s}"))
    routes = [first, Route(other, LocalTarget(lm, tgt.sampling, tgt.mode), k, cost)]
    return sorted(routes, key=lambda r: r.runtime in INEXACT)
