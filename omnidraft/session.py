"""The front door: one drafter paired with one target, streaming text, logging what the target
verified for the daemon, and running the adapter version the daemon last published. The CLI,
the jobs (`omnidraft pair`, the demo) and an app all generate through it.

    session = omnidraft.Session(drafter="smollm2-135m", target="qwen2.5-coder-0.5b")
    for text in session.stream("def fibonacci(n):"):
        print(text, end="")

A Session is safe to use from any thread: its generations are served one at a time, in turn
(a call made while another thread's generation runs waits for it), each returns its own Result,
and a new adapter goes live only between generations. Knows how the parts are wired; each part
(models, pair state, drafter and adapter, cost model, log) is its own module.
"""

from __future__ import annotations

import itertools
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Generator, Iterator, Sequence, Union

from omnidraft.decode.draft_length import K_MAX, REMOTE_K, CostModelK, FixedK
from omnidraft.decode.generate import Piece, Result, as_pieces, check_budget, pieces_ar, pieces_speculative, texts
from omnidraft.decode.metrics import Metrics
from omnidraft.decode.modes import check_verify_mode, default_verify_mode, is_lossless
from omnidraft.decode.target import LocalTarget
from omnidraft.decode.text import StopText, chat_preamble, drained, encode_messages, encode_prompt
from omnidraft.errors import OmniDraftError
from omnidraft.models.lm import common_prefix
from omnidraft.models.slots import Slots
from omnidraft.pairs.build import runtime_kind
from omnidraft.pairs.engine_choice import EngineChoice
from omnidraft.pairs.routing import Route, choose, forecast, kind, observe, warm
from omnidraft.pairs.runtime_choice import INEXACT, resolve
from omnidraft.pairs.runtime_choice import load as load_choice
from omnidraft.pairs.settings import Runtime, TargetRef
from omnidraft.pairs.spec import (DEFAULT_DRAFTER, PairSpec, adapter_store, load_spec, log_path, pair_dir, pair_name,
                                  save_spec)
from omnidraft.propose.config import DRAFT_CONFIDENCE, SpecConfig
from omnidraft.propose.lookup import LookupConfig
from omnidraft.propose.registry import get
from omnidraft.sampling import SamplingConfig
from omnidraft.remote.openai_api import OpenAITarget
from omnidraft.train.verlog import VerificationLog

DEFAULT_TARGET = "qwen2.5-coder-0.5b"
RECORD_TOPK = 64  # the target's top-k a training record keeps per generated position
Prompt = Union[str, Sequence[dict]]  # text, or a conversation of {"role", "content"} messages
Stops = Sequence[str]


@dataclass
class _Slot:
    """One conversation's state beside its caches: the target ids it last ran (prompt and answer),
    its earlier turns (text prompts copy from them) and when it last ran."""

    context: list[int] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    used: int = -1


def _note(message: str) -> None:
    print(f"omnidraft: {message}", file=sys.stderr, flush=True)


class Session:
    """``drafter``: a catalog name or model directory; None runs the target alone. ``target``: a
    model name, path or URL, or a ``TargetRef`` (pairs/settings.py: a server's token, tokenizer
    and fallback). ``k``: drafter tokens per round, 0..K_MAX; 0 runs the target alone (no drafter
    is loaded); None (the default): the pair's cost model chooses each round, 0 when speculation
    would not pay on this machine (pairs/cost.py: measured on first use, kept in the pair's
    folder; ``draft_length`` says what it reads), REMOTE_K for a server. ``spec``: the strategy
    (``ar`` is the target alone) and its stopping rules (default: omnidraft, a draft stopping after
    a token the drafter gives less than DRAFT_CONFIDENCE); with ``gamma`` the acceptance head decides
    each draft's length once the adapter has one. ``sampling``: greedy by default; every strategy
    samples exactly by default, ``verify`` (rejection | point-mass) may choose an approximate mode
    (``lossless`` says). ``lookup``: rounds may verify ids copied from the context (the prompt,
    the output, this conversation's earlier turns) where the cost model prefers them. ``log``:
    every generation's verifications go to the log the daemon trains from. ``adapter``: "latest"
    (the pair's last published version, switching when a newer one is published; with none yet,
    the pre-adapted one the package ships for the pair, adapters/shipped.py), "none", or a
    version name. ``runtime``: runtimes, programs, dtype, threads, n-gram cache bound
    (pairs/settings.py); ``Runtime(target="llamacpp")`` verifies on the target's GGUF with
    llama.cpp, exact with respect to the logits its verify calls compute (not batch-invariant,
    so not bit-for-bit its one-token-at-a-time output); ``Runtime(target="auto")`` takes the
    runtime `omnidraft pair` measured faster here (pairs/runtime_choice.py), and with ``route``
    (the default) the other of the program and llama.cpp beside it where that loads too: each
    generation runs where it is predicted to end first (pairs/routing.py: a long prompt reads far
    faster on the program, llama.cpp may decode faster). ``exact``: only bit-exact runtimes (the
    ExecuTorch program, PyTorch). ``metrics["target_runtime"]`` says which ran; a routed
    generation's ``metrics["predicted_ms"]`` holds each runtime's prediction, ``"forecast"`` the
    chosen one's parts (prefill ms, decoding tokens/s) and ``"work"`` the kind of work it was
    forecast as (a completion, a chat turn, a long one: pairs/routing.py ``kind``).
    With an OpenAI-API target each generation goes to the engine generating alone while that is
    measured faster than the pair (pairs/engine_choice.py; its output is the served model's own)."""

    def __init__(self, drafter: str | None = DEFAULT_DRAFTER, target: str | TargetRef = DEFAULT_TARGET, *,
                 k: int | None = None, spec: SpecConfig | None = None, sampling: SamplingConfig = SamplingConfig(),
                 verify: str | None = None, lookup: bool = True, log: bool = True, adapter: str = "latest",
                 runtime: Runtime = Runtime(), exact: bool = False, route: bool = True, slots: int = 1):
        from omnidraft.device.threads import set_threads
        from omnidraft.pairs.build import load_target

        target = target if isinstance(target, TargetRef) else TargetRef(target)
        spec = spec or SpecConfig(confidence=DRAFT_CONFIDENCE)
        asked = runtime.target
        fixed = None if k is None else FixedK(k)  # a bad k is refused before anything loads
        check_verify_mode(verify)
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise OmniDraftError(f"slots must be an integer >= 1, got {slots!r}")
        self.alone = drafter is None or k == 0 or not get(spec.strategy).speculative
        runtime = replace(runtime, target=resolve(None if self.alone else pair_name(drafter, target.ref),
                                                  runtime.target, exact))
        set_threads(runtime.threads)
        self.spec_cfg, self.sampling, self.runtime = spec, sampling, runtime
        self.verify = verify or default_verify_mode("ar" if self.alone else spec.strategy, remote=target.remote)
        self.lossless = is_lossless("ar" if self.alone else spec.strategy, self.verify, sampling)
        self._lock = threading.Lock()
        self._holder: int | None = None  # the thread whose generation runs now
        self.last: Result | None = None
        self._slots = [_Slot() for _ in range(slots)]
        self._at = 0  # the slot the latest generation ran on
        self._clock = itertools.count()
        self.lookup = LookupConfig() if lookup and not self.alone else None
        self.spec: PairSpec | None = None  # the pair, when a drafter runs
        self._pair = None if self.alone else self._load_drafter(drafter, target, adapter)
        if self._pair is not None and self.spec.target_tokenizer and not target.tokenizer:
            target = replace(target, tokenizer=self.spec.target_tokenizer)  # what `omnidraft pair` kept
        self.target, self.target_tok = load_target(target, sampling=sampling, verify=self.verify, runtime=runtime,
                                                   note=_note, exact=exact)
        self.target_runtime = "remote" if target.remote else runtime_kind(self.target_model)
        self.preamble = chat_preamble(self.target_tok)  # the ids every chat prompt starts with
        self.log = None
        self.draft_length = FixedK(0)
        self.engine = self.engine_choice = None
        self.routes: list[Route] = []  # when generations choose their runtime (pairs/routing.py)
        self._cost_base: dict = {}  # cost file -> the record this Session last read or wrote there
        if self.alone:
            self._make_slots(slots)
            self._hold_preamble()
            return
        self._pair_state()
        self.draft_length = fixed or (FixedK(REMOTE_K) if target.remote else self._cost_model())
        if route and asked == "auto" and runtime.target != "auto" and fixed is None:  # `omnidraft pair` timed both
            self.routes = self._routes(exact)
        if isinstance(self.target, OpenAITarget) and fixed is None:  # a serving engine; not when k is fixed
            self.engine = self.target
            self.engine_choice = EngineChoice.load(pair_dir(self.spec.name) / "engine.json")
        self._make_slots(slots)
        self._hold_preamble()
        self.log = VerificationLog(log_path()) if log else None

    # ------------------------------------------------------------------ building
    def _load_drafter(self, drafter: str, target: TargetRef, adapter: str):
        """The drafter with the adapter it should run (pairs/drafter.py); this pair's spec."""
        from omnidraft.models.loading import load_tokenizer
        from omnidraft.pairs.build import load_drafter
        from omnidraft.pairs.drafter import PairDrafter, check_adapter

        self.spec = PairSpec(drafter, target.ref, target.tokenizer)
        try:  # keep what `omnidraft pair` recorded (e.g. the remote target's tokenizer)
            self.spec = load_spec(self.spec.name)
        except OmniDraftError:
            pass
        self.store = adapter_store()
        if adapter == "latest" and self.store.latest(self.spec.name) is None:  # aligned before the first prompt
            from omnidraft.adapters import shipped

            shipped.install(self.store, self.spec.name)
        check_adapter(adapter, self.store, self.spec.name)
        r = self.runtime
        lm = load_drafter(drafter, r.drafter, quant=r.quant, max_seq=r.max_seq, specvocab_k=r.specvocab_k, note=_note)
        self.draft_tok = load_tokenizer(drafter)
        pair = PairDrafter(lm, drafter, self.spec.name, self.store, adapter)
        pair.refresh()
        return pair

    def _pair_state(self) -> None:
        """The vocabulary map and n-gram cache; the pair registered (again) once both models loaded."""
        from omnidraft.translate.state import PairState

        r = self.runtime
        self.pair = PairState(self.draft_tok, self.target_tok, self.drafter.vocab_size, self.target.vocab_size,
                              persist=True, policy=r.ngram_policy,
                              max_bytes=None if r.ngram_policy == "unbounded" else r.ngram_mib << 20)
        save_spec(self.spec)

    def _cost_model(self) -> CostModelK:
        """The pair's cost model on these runtimes (measured once, kept in the pair's folder)."""
        from omnidraft.pairs.cost import for_pair, record

        dl, self.cost_path, self.cost_on = for_pair(self.spec.name, self.target.model, self.drafter, self.runtime.dtype,
                                                    progress=lambda s: _note(f"cost model: {s}"))
        self._cost_base[self.cost_path] = record(dl.model, dl.reached, dl.accepted, self.cost_on)
        return dl

    def _routes(self, exact: bool) -> list:
        """The target on the runtime it loaded and on the other of the program and llama.cpp
        (not llama.cpp with ``exact``), the program first (ties go to it), when the other loads
        here and reads the same vocabulary; else none."""
        from omnidraft.pairs.build import local_target
        from omnidraft.pairs.cost import for_pair, record

        other = {"executorch": "llamacpp", "llamacpp": "executorch"}.get(self.target_runtime)
        timed = (load_choice(self.spec.name) or {}).get("predicted_tokens_per_s", {})
        if other not in timed or (exact and other in INEXACT):  # only what `omnidraft pair` timed here
            return []
        try:
            lm = local_target(self.spec.target, other, dtype=self.runtime.dtype)
        except OmniDraftError:
            return []
        if lm.vocab_size != self.target_model.vocab_size:
            return []
        dl, path, on = for_pair(self.spec.name, lm, self.drafter, self.runtime.dtype,
                                progress=lambda s: _note(f"cost model: {s}"))
        self._cost_base[path] = record(dl.model, dl.reached, dl.accepted, on)
        routes = [Route(self.target_runtime, self.target, self.draft_length, self.cost_path, self.cost_on),
                  Route(other, LocalTarget(lm, self.sampling, self.verify), dl, path, on)]
        return sorted(routes, key=lambda r: r.runtime in INEXACT)

    def _make_slots(self, n: int) -> None:
        """With ``n`` > 1 slots, every local model (each route's target and the drafter) keeps one
        cache per slot (models/slots.py), held between generations."""
        if n == 1:
            return
        targets = [r.target for r in self.routes] or [self.target]
        for t in {id(t): t for t in targets if isinstance(t, LocalTarget)}.values():
            t.model = Slots(t.model, n, note=_note)
        if self._pair is not None:
            self._pair.slot(n, note=_note)

    def _hold_preamble(self) -> None:
        """Every local target's cache (each route's, where generations are routed; each slot's)
        starts holding the chat template's preamble: the first chat prompt reads only its own turn,
        as later ones do, and a runtime not chosen yet is not priced for a system prompt the other
        holds. After the cost models, whose timed calls replace the cache."""
        models = [r.target.model for r in self.routes] or [self.target_model]
        for i in range(len(self._slots)):
            self._use(i)
            warm([m for m in models if m is not None], self.preamble)
        self._use(0)

    def _use(self, i: int) -> None:
        """Run the next generation on slot ``i``'s caches."""
        self._at = i
        models = [r.target.model for r in self.routes] + [self.target_model, self.drafter]
        for m in {id(m): m for m in models if isinstance(m, Slots)}.values():
            m.use(i)

    def _slot_for(self, target_ids: list[int]) -> _Slot:
        """The slot a prompt runs on (now in use): the one that last ran the longest prefix of it
        beyond the chat preamble, else the least recently used, its earlier turns forgotten."""
        n = len(self._slots)
        held = [common_prefix(s.context, target_ids) for s in self._slots]
        best = max(range(n), key=held.__getitem__)
        if held[best] <= len(self.preamble) and n > 1:
            best = min(range(n), key=lambda i: self._slots[i].used)
            self._slots[best].turns = []
        self._use(best)
        return self._slots[best]

    def _cached(self, target_ids: list[int]) -> int:
        """Prompt ids the running target's cache holds already (none where each generation forks a
        fresh cache, or for a server)."""
        m = self.target_model
        if m is None or callable(getattr(m, "fork", None)):
            return 0
        return min(common_prefix(m.tokens, target_ids), len(target_ids) - 1)

    @contextmanager
    def _sampled(self, sampling: SamplingConfig | None) -> Iterator[None]:
        """The generation inside samples with ``sampling`` (None: the Session's own)."""
        targets = [r.target for r in self.routes] or [self.target]
        if sampling is None or all(t.sampling == sampling for t in targets):
            yield
            return
        if not all(isinstance(t, LocalTarget) for t in targets):
            raise OmniDraftError("a remote target samples with the Session's own settings",
                                 "open a Session with sampling=... for it")
        before = [t.sampling for t in targets]
        for t in targets:
            t.sampling = sampling
        try:
            yield
        finally:
            for t, was in zip(targets, before):
                t.sampling = was

    def _take(self, route) -> None:
        """Run the next generation on ``route``'s target and cost model."""
        self.target, self.draft_length, self.target_runtime = route.target, route.draft_length, route.runtime
        self.cost_path, self.cost_on = route.cost_path, route.cost_on

    # ------------------------------------------------------------------ what runs
    @property
    def drafter(self):
        """The drafter LM as it runs now (with the live adapter), or None with the target alone."""
        return None if self._pair is None else self._pair.lm

    @property
    def drafter_runtime(self) -> str | None:
        return None if self._pair is None else runtime_kind(self.drafter)

    @property
    def version(self) -> str | None:
        """The adapter version the drafter runs (None: no adapter)."""
        return None if self._pair is None else self._pair.version

    @property
    def has_head(self) -> bool:
        """The running adapter version has an acceptance head (adaptive drafting can use it)."""
        return self._pair is not None and self._pair.has_head

    @property
    def head(self):
        """The running version's AcceptanceHead for an eager drafter (None: none, or a program,
        which scores with the head in its .ptd)."""
        return None if self._pair is None else self._pair.head

    @property
    def base(self):
        """The eager drafter as loaded, before any adapter (None for a program or no drafter)."""
        return None if self._pair is None else self._pair.base

    @property
    def target_model(self):
        """The local target's model (an LM), None for a server."""
        return self.target.model if isinstance(self.target, LocalTarget) else None

    def refresh(self) -> str | None:
        """Switch to the adapter version this session should run (the newest published, with
        ``adapter="latest"``), waiting for a generation in flight to end first."""
        with self._turn():
            self._refresh()
        return self.version

    def _refresh(self) -> None:
        had = self.version
        if self._pair is not None and self._pair.refresh() and had is not None:
            for dl in [r.draft_length for r in self.routes] or [self.draft_length]:
                dl.probe_soon()  # a new adapter may draft better

    def save_cost(self) -> None:
        """Keep what this session learned about acceptance and prices for the next one, merged with
        what other Sessions of the pair kept there meanwhile (pairs/cost_merge.py), and go on from
        the merged model."""
        from omnidraft.pairs import cost

        dl = self.draft_length
        if not isinstance(dl, CostModelK):
            return
        base = self._cost_base.get(self.cost_path)
        mine = cost.record(dl.model, dl.reached, dl.accepted, self.cost_on)
        written = self._cost_base[self.cost_path] = cost.write(self.cost_path, mine, base)
        if written is not mine:  # another Session's evidence joined this one's
            model, dl.reached, dl.accepted = cost.parse(written)
            vars(dl.model).update(vars(model))
            dl.reestimate()

    # ------------------------------------------------------------------ generation
    @contextmanager
    def _turn(self) -> Iterator[None]:
        """One generation at a time: another thread's waits its turn; this thread's second one
        while its first is still open is refused (waiting on itself would never end)."""
        me = threading.get_ident()
        if self._holder == me:
            raise OmniDraftError("this thread's earlier generation on this Session is still open",
                                 "read that stream to its end or close() it before starting another")
        with self._lock:
            self._holder = me
            try:
                yield
            finally:
                self._holder = None

    def stream(self, prompt: Prompt, *, max_new_tokens: int = 128, chat: bool = False, stop: Stops = (),
               sampling: SamplingConfig | None = None) -> Generator[str, None, Result]:
        """Yield text as the target commits it; return (and keep in ``last``) the Result. Waits
        while another thread's generation runs. Closed early (``close()``), it leaves the caches
        consistent: the next generation is exact. See ``pieces`` for the options."""
        return texts(self.pieces(prompt, max_new_tokens=max_new_tokens, chat=chat, stop=stop, sampling=sampling))

    def pieces(self, prompt: Prompt, *, max_new_tokens: int | None = 128, chat: bool = False, stop: Stops = (),
               sampling: SamplingConfig | None = None, strict: bool = False) -> Generator[Piece, None, Result]:
        """``stream`` as Pieces: the text with where its tokens came from (drafted, copied from the
        context, or the target's own; decode/generate.py). ``prompt``: text (through the chat
        template with ``chat``), or a conversation: a list of ``{"role", "content"}`` messages
        through the target's chat template, which carries its earlier turns itself (the Session's
        own earlier turns are not added to it). ``stop``: strings that end the text where one
        appears (not shown; ``finish_reason`` "stop"). ``sampling``: this generation's sampling
        instead of the Session's (a local target only). With several ``slots`` it runs on the slot
        whose caches hold the longest prefix of its prompt beyond the chat preamble, else on the
        least recently used one (whose earlier turns it forgets). ``max_new_tokens``: None runs to
        the context window's end; with ``strict``, a budget past the window is an error rather than
        clipped to it."""
        with self._turn(), self._sampled(sampling):
            messages = not isinstance(prompt, str)
            if messages:
                target_ids, chat = encode_messages(self.target_tok, prompt), True
            else:
                target_ids = encode_prompt(self.target_tok, prompt, chat=chat)
            slot = self._slot_for(target_ids)
            earlier = [] if messages else slot.turns
            stops = StopText(stop) if stop else None
            if self.alone:
                cached = self._cached(target_ids)
                budget = check_budget(target_ids, max_new_tokens, self.target, strict=strict)
                result = yield from pieces_ar(self.target, self.target_tok, target_ids, max_new_tokens=budget,
                                              stops=stops)
            else:
                self._refresh()
                routed = None
                if self.routes:  # before the budget: the runtimes' windows differ
                    work = kind(target_ids, self.preamble, chat)
                    asked = max_new_tokens or max(r.target.max_length for r in self.routes) - len(target_ids)
                    route, routed = choose(self.routes, target_ids, asked, work)
                    ahead = forecast(route, target_ids, work)  # before its cache moves
                    self._take(route)
                budget = check_budget(target_ids, max_new_tokens, self.target, strict=strict)
                cached = self._cached(target_ids)
                if self.engine_choice is not None and stops is None and self.engine_choice.engine_now():
                    result = yield from self._engine_alone(target_ids, budget)  # (stop strings: the pair)
                else:
                    draft_ids = self._draft_ids(prompt, target_ids, chat)
                    text = prompt[-1]["content"] if messages else prompt
                    result = yield from self._pair_generation(text, target_ids, draft_ids, budget, earlier, stops)
                if routed:  # its prompt read and decoding teach the route's prices (kept with its cost model)
                    observe(route, ahead, result.metrics, work)
                    self.save_cost()
                    result.metrics.update(predicted_ms=routed, forecast={k: round(v, 3) for k, v in ahead.items()},
                                          work=work)
            result.metrics.update(adapter=self.version, target_runtime=self.target_runtime,
                                  prompt_tokens=len(target_ids), prompt_cached=cached, slot=self._at)
            if self.lookup and not messages:
                slot.turns[:] = (slot.turns + target_ids + result.token_ids)[-self.lookup.max_tokens:]
            slot.context, slot.used = target_ids + result.token_ids, next(self._clock)
            self.last = result
            return result

    def _draft_ids(self, prompt: Prompt, target_ids: list[int], chat: bool) -> list[int]:
        """The prompt in the drafter's vocabulary: a conversation through the drafter's own chat
        template (the target's text, tokenized by the drafter, where that refuses it)."""
        if isinstance(prompt, str):
            return encode_prompt(self.draft_tok, prompt, chat=chat)
        try:
            return encode_messages(self.draft_tok, prompt)
        except OmniDraftError:
            text = self.target_tok.decode(target_ids, skip_special_tokens=False)
            return [int(i) for i in self.draft_tok(text, add_special_tokens=False)["input_ids"]]

    def _pair_generation(self, prompt: str, target_ids: list[int], draft_ids: list[int], budget: int,
                         earlier: list[int], stops: StopText | None) -> Generator[Piece, None, Result]:
        from omnidraft.train.records import build_record

        log = self.log  # as it is now: unlogged() elsewhere does not change this generation
        adaptive = self.spec_cfg.gamma is not None and self.has_head  # the head decides each draft's length
        cfg = self.spec_cfg if adaptive else replace(self.spec_cfg, gamma=None)
        dl = self.draft_length
        if self.spec_cfg.priced and self.has_head and isinstance(dl, CostModelK) and dl.pinned is None:
            # the cost model says whether a round drafts; the head, priced by it, how far
            cfg = replace(cfg, stop_below=tuple(dl.model.stop_below(dl.rates(), dl.predicted, dl.k_max)))
            k = dl.reaching()
        else:
            cfg = replace(cfg, priced=False, stop_below=None)
            k = FixedK(K_MAX) if adaptive else dl
        try:
            result = yield from pieces_speculative(
                self.drafter, self.target, self.pair, target_ids, draft_ids, cfg=cfg, k=k,
                max_new_tokens=budget, record_topk=RECORD_TOPK if log is not None else 0,
                head=self.head, lookup=self.lookup, earlier=earlier, stops=stops)
        finally:  # learnt n-grams and acceptance survive a generation closed early or interrupted
            self.pair.save()
            self.save_cost()
        if isinstance(self.draft_length, CostModelK):
            result.metrics["cost_model"] = self.draft_length.state()
        if self.engine_choice is not None:
            self.engine_choice.observe(False, result.metrics["new_tokens"], result.metrics["wall_s"])
        if log is not None and result.verified is not None:
            log.append(self.spec.name, prompt, build_record(self.pair.vmap, result.verified).to_bytes())
        return result

    def _engine_alone(self, target_ids: list[int], budget: int) -> Generator[Piece, None, Result]:
        """The serving engine generating on its own (one streamed request): its own output of the
        served target, so exact; nothing verified, so no training record. ``metrics["engine"]``
        names what produced it."""
        alone = yield from as_pieces(self.engine.stream_alone(target_ids, budget))
        self.engine_choice.observe(True, alone.tokens, alone.seconds)
        m = Metrics("engine", new_tokens=alone.tokens, target_forwards=alone.tokens, wall_s=alone.seconds)
        return Result(alone.text, self.target_tok(alone.text, add_special_tokens=False).input_ids,
                      {**m.summary(), "verify": None, "lossless": True, "engine": self.engine.describe()}, m,
                      finish_reason="length" if alone.tokens >= budget else "stop")

    def generate(self, prompt: Prompt, *, max_new_tokens: int = 128, chat: bool = False, stop: Stops = (),
                 sampling: SamplingConfig | None = None) -> Result:
        """``stream`` read to its end: this call's own Result."""
        return drained(self.stream(prompt, max_new_tokens=max_new_tokens, chat=chat, stop=stop, sampling=sampling))

    @property
    def turns(self) -> list[int]:
        """Target ids of the current conversation's earlier prompts and answers (text prompts copy from them)."""
        return self._slots[self._at].turns

    @property
    def slots(self) -> int:
        return len(self._slots)

    def new_conversation(self) -> None:
        """Forget the earlier turns: later generations copy only from their own prompt and output."""
        self._slots[self._at].turns = []

    @contextmanager
    def pair_only(self) -> Iterator["Session"]:
        """Generations inside the block run the pair even where the engine would be handed them
        (what pairing measures), and leave the engine figures as they were."""
        choice, self.engine_choice = self.engine_choice, None
        try:
            yield self
        finally:
            self.engine_choice = choice

    @contextmanager
    def unlogged(self) -> Iterator["Session"]:
        """Generations started inside the block leave no training record (held-out
        measurements); they skip computing one too (the target's top-k rows cost ~0.4 ms a token)."""
        log, self.log = self.log, None
        try:
            yield self
        finally:
            self.log = log

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
