"""The front door: one drafter paired with one target, streaming text, logging what the target
verified for the daemon, and running the adapter version the daemon last published. The CLI,
the jobs (`omnidraft pair`, the demo), the server and an app all generate through it.

    session = omnidraft.Session(drafter="smollm2-135m", target="qwen2.5-coder-0.5b")
    for text in session.stream("def fibonacci(n):"):
        print(text, end="")

Every answer the pair gives is remembered (memory/: the pair's memory of earlier answers, in
the target's ids), and later rounds may verify what followed the same text before.

A Session is safe to use from any thread: its generations are served one at a time, in turn
(a call made while another thread's generation runs waits for it), each returns its own Result,
and a new adapter goes live only between generations. Each generation runs on the one Route its
router hands out (pairs/router.py). Knows the order of a generation; its parts are built by
pairs/assemble.py, its conversation slots are pairs/conversations.py's.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Generator, Iterator, Sequence, Union

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import (Piece, Result, check_budget, pieces_ar, pieces_engine, pieces_speculative,
                                       texts)
from omnidraft.decode.modes import check_verify_mode, default_verify_mode, is_lossless
from omnidraft.decode.policy import round_rules
from omnidraft.decode.target import LocalTarget
from omnidraft.decode.text import StopText, chat_preamble, drafter_prompt, drained, encode_messages, encode_prompt
from omnidraft.device.saved_states import SavedStates
from omnidraft.errors import OmniDraftError
from omnidraft.generating import generating
from omnidraft.heap import trim
from omnidraft.home import home
from omnidraft.memory.config import MemoryConfig
from omnidraft.memory.spaces import LOCAL, Memories
from omnidraft.models.lm import common_prefix
from omnidraft.pairs.assemble import assemble
from omnidraft.pairs.build import exactness, runtime_kind
from omnidraft.pairs import routing
from omnidraft.pairs.conversations import Conversations
from omnidraft.pairs.router import Pick
from omnidraft.pairs.runtime_choice import resolve
from omnidraft.pairs.settings import DEFAULT_CACHE_RAM_MIB, Runtime, TargetRef
from omnidraft.pairs.spec import DEFAULT_DRAFTER, log_path, pair_dir, pair_name
from omnidraft.propose.config import DRAFT_CONFIDENCE, SpecConfig
from omnidraft.propose.lookup import LookupConfig
from omnidraft.propose.registry import get
from omnidraft.sampling import SamplingConfig
from omnidraft.train.verlog import VerificationLog
from omnidraft.turns import Turns

DEFAULT_TARGET = "qwen2.5-coder-0.5b"
RECORD_TOPK = 64  # the target's top-k a training record keeps per generated position
Prompt = Union[str, Sequence[dict]]  # text, or a conversation of {"role", "content"} messages
Stops = Sequence[str]


def _saved_states(runtime: Runtime, stateful: bool) -> SavedStates | None:
    """Where conversations' states are kept: nowhere with ``runtime.cache_ram_mib`` 0, or by default
    (None) where no model in use can save its state (``stateful``: some can)."""
    ram = DEFAULT_CACHE_RAM_MIB if runtime.cache_ram_mib is None else runtime.cache_ram_mib
    if not ram or (runtime.cache_ram_mib is None and not stateful):
        return None
    folder = Path(runtime.state_dir) if runtime.state_dir else home() / "states"
    return SavedStates(ram << 20, folder if runtime.state_disk_mib else None,
                       runtime.state_disk_mib << 20, background=True)  # a turn ends with its state in RAM


def _note(message: str) -> None:
    print(f"omnidraft: {message}", file=sys.stderr, flush=True)


class Session:
    """``drafter``: a catalog name or model directory; None runs the target alone. ``target``: a
    model name, path or URL, or a ``TargetRef`` (pairs/settings.py: a server's token, tokenizer and
    fallback). ``k``: drafter tokens per round, 0..K_MAX (0: the target alone); None: the pair's
    cost model chooses each round, 0 where speculation would not pay here (pairs/cost.py),
    REMOTE_K for a server. ``spec``: the strategy (``ar``: the target alone) and its stopping rules
    (decode/policy.py; default: a draft stops after a token the drafter gives under
    DRAFT_CONFIDENCE). ``sampling``: greedy by default; sampling is exact by default, ``verify``
    (rejection | point-mass) may choose an approximate mode (``lossless`` says). ``lookup``: rounds
    may verify ids copied from the context. ``memory``: the pair remembers its answers and rounds
    may verify what followed the same text in them (memory/; bounded by ``runtime.memory_mib``; a
    ``Memories``: that memory instead of the pair's own, e.g. a benchmark's scratch one).
    ``log``: verifications go to the log the daemon trains from. ``adapter``: "latest" (the
    pair's last published version; before any, the one the package ships), "none", or a version
    name. ``runtime``: runtimes, dtype, threads, n-gram cache
    bound (pairs/settings.py); llama.cpp verifies exactly with respect to the logits its verify
    calls compute (not batch-invariant); ``target="auto"`` takes the runtime `omnidraft pair`
    measured faster here and, with ``route``, routes each generation between the program and
    llama.cpp (pairs/router.py; ``metrics["predicted_ms"]``). ``exact``: only bit-exact runtimes.
    ``slots``: conversations whose caches are kept at once (pairs/conversations.py). An OpenAI-API
    target hands generations to the engine alone while it is measured faster (pairs/engine_choice.py)."""

    def __init__(self, drafter: str | None = DEFAULT_DRAFTER, target: str | TargetRef = DEFAULT_TARGET, *,
                 k: int | None = None, spec: SpecConfig | None = None, sampling: SamplingConfig = SamplingConfig(),
                 verify: str | None = None, lookup: bool = True, memory: bool | Memories = True, log: bool = True,
                 adapter: str = "latest",
                 runtime: Runtime = Runtime(), exact: bool = False, route: bool = True, slots: int = 1):
        from omnidraft.device.threads import set_threads

        target = target if isinstance(target, TargetRef) else TargetRef(target)
        spec = spec or SpecConfig(confidence=DRAFT_CONFIDENCE)
        fixed = None if k is None else FixedK(k)  # a bad k is refused before anything loads
        check_verify_mode(verify)
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise OmniDraftError(f"slots must be an integer >= 1, got {slots!r}")
        self.alone = drafter is None or k == 0 or not get(spec.strategy).speculative
        asked, strategy = runtime.target, "ar" if self.alone else spec.strategy
        runtime = replace(runtime, target=resolve(None if self.alone else pair_name(drafter, target.ref),
                                                  runtime.target, exact))
        set_threads(runtime.threads)
        self.spec_cfg, self.sampling, self.runtime = spec, sampling, runtime
        self.verify = verify or default_verify_mode(strategy, remote=target.remote)
        self.lossless = is_lossless(strategy, self.verify, sampling)
        self._turns = Turns()  # one generation at a time
        self.last: Result | None = None
        self.lookup = LookupConfig() if lookup and not self.alone else None
        parts = assemble(None if self.alone else drafter, target, fixed=fixed, sampling=sampling, verify=self.verify,
                         adapter=adapter, runtime=runtime, exact=exact, route=route, asked=asked, note=_note)
        self.spec, self._pair, self.store, self.draft_tok = parts.spec, parts.drafter, parts.store, parts.draft_tok
        self.pair, self.target_tok, self.router = parts.pair, parts.target_tok, parts.router
        self.preamble = chat_preamble(self.target_tok)  # the ids every chat prompt starts with
        self.conversations = Conversations(slots, self.router.routes, self._pair, self.preamble, _note, runtime.budget)
        self.conversations.states = _saved_states(runtime, self.conversations.stateful)
        for name in self.conversations.load_saved_runtimes():
            _note(f"{name.partition(':')[2]} loaded: saved conversations ran on it")
        if self.conversations.states is not None and not self.conversations.stateful:
            _note("saved conversation states need llama.cpp or ExecuTorch programs exported by this version (their caches "
                  "named: `omnidraft export`); none runs here, so conversations are read again")
        self.log = VerificationLog(log_path()) if log and not self.alone else None
        self.memories = memory if isinstance(memory, Memories) and not self.alone else None
        if memory is True and not self.alone:
            bound = MemoryConfig(max_bytes=runtime.memory_mib << 20)
            self.memories = Memories(pair_dir(self.spec.name) / "memory", bound, _note)
        self.memory_use = "on" if self.memories else "off"  # "read": recall without remembering (unlogged)
        trim()  # what loading and timing the pair freed leaves the process (omnidraft/heap.py)

    # ------------------------------------------------------------------ what runs
    route = property(lambda self: self.router.route, doc="The Route the latest generation ran on (before any: the first).")
    target = property(lambda self: self.route.target, doc="The current route's Target.")
    draft_length = property(lambda self: self.route.draft_length, doc="The current route's DraftLength.")
    target_runtime = property(lambda self: self.route.runtime, doc="executorch, llamacpp, eager or remote.")
    drafter = property(lambda self: None if self._pair is None else self._pair.lm,
                       doc="The drafter LM as it runs now (with the live adapter); None with the target alone.")
    version = property(lambda self: None if self._pair is None else self._pair.version,
                       doc="The adapter version the drafter runs (None: no adapter).")
    has_head = property(lambda self: self._pair is not None and self._pair.has_head,
                        doc="The running adapter version has an acceptance head.")
    head = property(lambda self: None if self._pair is None else self._pair.head,
                    doc="The running version's AcceptanceHead for an eager drafter (a program scores with its .ptd's).")
    base = property(lambda self: None if self._pair is None else self._pair.base,
                    doc="The eager drafter as loaded, before any adapter (None for a program or no drafter).")
    engine_choice = property(lambda self: self.router.choice, doc="An OpenAI-API target's engine figures, or None.")
    turns = property(lambda self: self.conversations.current.turns,
                     doc="Target ids of the current conversation's earlier prompts and answers.")
    slots = property(lambda self: len(self.conversations.slots))

    drafter_runtime = property(lambda self: None if self._pair is None else runtime_kind(self.drafter))
    target_model = property(lambda self: self.target.model if isinstance(self.target, LocalTarget) else None,
                            doc="The current route's local model (an LM), None for a server.")
    engine = property(lambda self: self.router.engine, doc="The engine an OpenAI-API target hands generations to.")

    def refresh(self) -> str | None:
        """Switch to the adapter version this session should run (the newest published, with
        ``adapter="latest"``), waiting for a generation in flight to end first."""
        with self._turns.turn():
            self._refresh()
        return self.version

    def _refresh(self) -> None:
        had = self.version
        if self._pair is not None and self._pair.refresh() and had is not None:
            self.router.probe_soon()  # a new adapter may draft better

    def save_cost(self) -> None:
        """Keep what this session learned about acceptance and prices for the next one, merged with
        what other Sessions of the pair kept meanwhile, and go on from the merged model."""
        self.router.keep()

    # ------------------------------------------------------------------ generation
    def stream(self, prompt: Prompt, *, max_new_tokens: int = 128, chat: bool = False, stop: Stops = (),
               sampling: SamplingConfig | None = None) -> Generator[str, None, Result]:
        """Yield text as the target commits it; return (and keep in ``last``) the Result. Waits
        while another thread's generation runs. Closed early (``close()``), it leaves the caches
        consistent: the next generation is exact. See ``pieces`` for the options."""
        return texts(self.pieces(prompt, max_new_tokens=max_new_tokens, chat=chat, stop=stop, sampling=sampling))

    def pieces(self, prompt: Prompt, *, max_new_tokens: int | None = 128, chat: bool = False, stop: Stops = (),
               sampling: SamplingConfig | None = None, strict: bool = False,
               memory_space: str = LOCAL) -> Generator[Piece, None, Result]:
        """``stream`` as Pieces: the text with where its tokens came from (drafted, copied from the
        context, or the target's own; decode/generate.py). ``prompt``: text (through the chat
        template with ``chat``), or a conversation: a list of ``{"role", "content"}`` messages
        through the target's chat template, which carries its earlier turns itself (the Session's
        own earlier turns are not added to it). ``stop``: strings that end the text where one
        appears (not shown; ``finish_reason`` "stop"). ``sampling``: this generation's sampling
        instead of the Session's (a local target only). ``max_new_tokens``: None runs to the
        context window's end; with ``strict``, a budget past the window is an error rather than
        clipped to it. With several ``slots`` it runs on the slot whose caches hold the longest
        prefix of its prompt (pairs/conversations.py). ``memory_space``: the part of the pair's
        memory it recalls from and is remembered in, and whose conversations' caches and saved states
        it may start from (a server gives each API key its own)."""
        with self._turns.turn(), generating(), self.router.sampled(sampling):
            messages = not isinstance(prompt, str)
            chat = chat or messages
            ids = encode_messages(self.target_tok, prompt) if messages else encode_prompt(self.target_tok, prompt,
                                                                                         chat=chat)
            slot = self.conversations.slot_for(ids, memory_space)
            fresh = ids[common_prefix(slot.context, ids):]  # what the memory does not hold of the prompt
            stops = StopText(stop) if stop else None
            if not self.alone:
                self._refresh()
            pick = self.router.pick(ids, max_new_tokens, self.preamble, chat, stops is not None)
            budget = check_budget(ids, max_new_tokens, pick.route.target, strict=strict)
            cached = routing.cached(pick.route, ids)
            result = None
            try:
                if self.alone:
                    result = yield from pieces_ar(pick.route.target, self.target_tok, ids, budget=budget,
                                                  stops=stops)
                elif pick.route.alone:
                    result = yield from pieces_engine(pick.route.target, self.target_tok, ids, max_new_tokens=budget)
                else:
                    text = prompt[-1]["content"] if messages else prompt
                    result = yield from self._pair_generation(pick, text, ids, drafter_prompt(
                        self.draft_tok, self.target_tok, prompt, ids, chat=chat), budget,
                        [] if messages else slot.turns, stops, fresh, memory_space)
            finally:  # learnt n-grams and prices survive a generation closed early or interrupted
                if self.pair is not None and not pick.route.alone:
                    self.pair.save()
                self.router.finish(pick, None if result is None else result.metrics)
                trim()  # what the generation freed leaves the process (omnidraft/heap.py)
            result.metrics.update(adapter=self.version, target_runtime=pick.route.runtime,
                                  exactness=exactness(pick.route.target), prompt_tokens=len(ids),
                                  prompt_cached=cached, slot=self.conversations.at,
                                  prompt_restored=self.conversations.restored[1],
                                  restored_from=self.conversations.restored[0] or None)
            keep = self.lookup.max_tokens if self.lookup and not messages else 0
            self.conversations.ran(slot, ids, result.token_ids, keep)
            self.last = result
            return result

    def _pair_generation(self, pick: Pick, prompt: str, target_ids: list[int], draft_ids: list[int], budget: int,
                         earlier: list[int], stops: StopText | None, fresh: list[int],
                         space: str) -> Generator[Piece, None, Result]:
        from omnidraft.train.records import build_record

        log, use = self.log, self.memory_use  # as they are now: unlogged() elsewhere does not change them
        memory = self.memories.space(space) if use != "off" else None
        if memory is not None:
            memory.sync()  # what this and other processes remembered since
        recalls = memory.generation() if memory is not None else None
        cfg, k = round_rules(self.spec_cfg, pick.route.draft_length, self.has_head)
        result = yield from pieces_speculative(
            self.drafter, pick.route.target, self.pair, target_ids, draft_ids, cfg=cfg, k=k,
            budget=budget, record_topk=RECORD_TOPK if log is not None else 0,
            head=self.head, lookup=self.lookup, earlier=earlier, memory=recalls, stops=stops)
        if log is not None and result.verified is not None:
            log.append(self.spec.name, prompt, build_record(self.pair.vmap, result.verified).to_bytes())
        if recalls is not None:
            kept = fresh[-self.memories.cfg.max_prompt:] if self.memories.cfg.max_prompt else []
            recalls.remember(kept + result.token_ids if use == "on" else [], tally(result.metrics))
        return result

    def generate(self, prompt: Prompt, *, max_new_tokens: int = 128, chat: bool = False, stop: Stops = (),
                 sampling: SamplingConfig | None = None) -> Result:
        """``stream`` read to its end: this call's own Result."""
        return drained(self.stream(prompt, max_new_tokens=max_new_tokens, chat=chat, stop=stop, sampling=sampling))

    def new_conversation(self) -> None:
        """Forget the earlier turns: later generations copy only from their own prompt and output."""
        self.conversations.current.turns = []

    @contextmanager
    def pair_only(self) -> Iterator["Session"]:
        """Generations inside the block run the pair even where the engine would be handed them
        (what pairing measures), and leave the engine figures as they were."""
        choice, self.router.choice = self.router.choice, None
        try:
            yield self
        finally:
            self.router.choice = choice

    @contextmanager
    def unlogged(self, memory: str = "off") -> Iterator["Session"]:
        """Generations started inside the block leave no training record (held-out
        measurements); they skip computing one too (the target's top-k rows cost ~0.4 ms a token).
        ``memory``: "off", they neither recall from the memory nor are remembered; "read", they
        recall but are not remembered; "on", as outside the block."""
        if memory not in ("off", "read", "on"):
            raise OmniDraftError(f"unlogged(memory=...) must be off, read or on, got {memory!r}")
        log, self.log = self.log, None
        use, self.memory_use = self.memory_use, memory if self.memories else "off"
        try:
            yield self
        finally:
            self.log, self.memory_use = log, use

    def close(self) -> None:
        if self.conversations.states is not None:
            self.conversations.states.close()  # the states waiting for their files written
        if self.log is not None:
            self.log.close()
        if self.memories is not None:
            self.memories.close()


def tally(metrics: dict) -> dict[str, tuple[int, int, int]]:
    """A generation's rounds by who proposed (drafter, context, memory): (rounds, proposed, accepted)."""
    kinds = metrics.get("rounds_by_kind", {})
    return {source: (k["rounds"], k["proposed"], k["accepted"])
            for source, k in ((s, kinds.get(kind)) for s, kind in (("drafter", "drafter"), ("context", "lookup"),
                                                                    ("memory", "memory"))) if k}
