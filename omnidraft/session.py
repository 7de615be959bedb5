"""The embeddable API: one drafter paired with one target, streaming text, logging training
records, and picking up adapter versions the daemon publishes without a restart.

    session = omnidraft.Session(drafter="smollm2-135m", target="qwen2.5-coder-0.5b")
    for text in session.stream("def fibonacci(n):"):
        print(text, end="")

Knows how the parts are wired; each part (models, pair state, log, adapters) is its own module.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Generator, Iterator

from omnidraft.errors import OmniDraftError
from omnidraft.decode.generate import Result, stream_speculative
from omnidraft.decode.modes import check_verify_mode, default_verify_mode, is_lossless
from omnidraft.decode.text import encode_prompt, model_eos_ids, stop_ids
from omnidraft.pairs.engine_choice import EngineChoice
from omnidraft.pairs.llamacpp import LlamaCppAlone, check_engine
from omnidraft.pairs.spec import (DEFAULT_DRAFTER, PairSpec, adapter_store, load_spec, log_path, pair_dir,
                                  save_spec)
from omnidraft.sampling import SamplingConfig
from omnidraft.propose.config import SpecConfig
from omnidraft.propose.lookup import LookupConfig
from omnidraft.propose.registry import STRATEGIES, get

DEFAULT_K = 4  # drafter tokens per round where no cost model applies (a remote target)


class Session:
    """``target``: catalog name, model dir, .gguf, http(s):// URL of `omnidraft serve-target`
    (then ``token`` and, unless the server's model name is a catalog name, ``target_tokenizer``), or
    openai+http(s)://HOST:PORT/v1 of an OpenAI-compatible server (``token``, ``target_tokenizer``,
    ``target_model`` / ``target_context`` when it serves several models / not 2048 tokens, and
    ``target_engine`` when its /models does not say which engine it is: serve/openai_api.py).
    ``k``: drafter tokens per round; None (the default): the pair's cost model chooses it each
    round, 0..``max_k``, 0 (the target alone) when speculation would not pay on this machine
    (pairs/cost.py; measured here on first use, kept in the pair's folder; ``self.draft_length``
    says what it reads); with an OpenAI-API target, each generation goes to the engine generating
    alone while that is measured faster than the pair (pairs/engine_choice.py). ``gamma``:
    adaptive drafting with the pair's acceptance head once one is published (up to ``max_k``).
    ``log``: append every generation's training record to the log.
    ``drafter_runtime``: ``executorch`` runs the drafter as the program `omnidraft export` wrote
    for (``quant``, ``max_seq``), each adapter version as a .ptd written on first use; ``eager``
    on PyTorch; ``auto`` (the default) the program when one was exported and loads, else eager.
    ``target_runtime``: the same for a local target and the program of `omnidraft export
    --target`. ``self.drafter_runtime`` / ``self.target_runtime`` say what was chosen.
    ``verify`` (sampling only): rejection | point-mass; default the strategy's lossless mode
    (modes.py); ``self.lossless`` says whether the chosen one is exact.
    Generations are independent: two ``stream`` generators may be interleaved (an eager drafter
    and a local target fork their caches per generation; an ExecuTorch drafter or a remote
    target refuses a second generation while one is in flight, with a clear error).
    ``lookup`` (default on): rounds may verify ids copied from the context instead of drafting
    (propose/lookup.py), where the cost model prefers them; the context is the prompt, the output
    so far and the earlier turns of this session (``new_conversation()`` forgets them).
    ``engine="llamacpp"`` (greedy, a local target with a GGUF, llama-cpp-python installed): each
    generation goes to the target's GGUF on llama.cpp while that is measured faster than the pair,
    as with an OpenAI-API target; its output is llama.cpp's own greedy output of the GGUF (the
    pair's is the target program's, which agrees with it on ~98% of tokens: docs/programs.md).
    """

    def __init__(self, drafter: str = DEFAULT_DRAFTER, target: str = "qwen2.5-coder-0.5b", *,
                 strategy: str = "omnidraft", k: int | None = None, gamma: float | None = None, max_k: int = 8,
                 sampling: SamplingConfig = SamplingConfig(), target_dtype: str = "bf16",
                 token: str | None = None, target_tokenizer: str | None = None, log: bool = True,
                 record_topk: int = 64, threads: int | None = None, drafter_runtime: str = "auto",
                 quant: str = "8da8w", max_seq: int = 1024, verify: str | None = None,
                 target_runtime: str = "auto", target_model: str | None = None, target_context: int = 2048,
                 target_engine: str | None = None, lookup: bool = True, engine: str | None = None):
        from omnidraft.device.runtime import ExecuTorchLM
        from omnidraft.device.threads import set_threads
        from omnidraft.models.loading import load_tokenizer
        from omnidraft.pairs.build import load_drafter, load_target
        from omnidraft.train.verlog import VerificationLog
        from omnidraft.translate.state import PairState

        if not get(strategy).speculative:
            raise OmniDraftError(f"a Session runs speculative strategies, not {strategy!r}",
                                 f"use one of {', '.join(s for s in STRATEGIES if get(s).speculative)}")
        check_verify_mode(verify)
        set_threads(threads)
        self.spec = PairSpec(drafter, target, target_tokenizer)
        known = True
        try:  # keep what `omnidraft pair` recorded (e.g. the remote target's tokenizer)
            self.spec = load_spec(self.spec.name)
        except OmniDraftError:
            known = False
        self.sampling = sampling
        gguf = check_engine(engine, self.spec.target, remote=self.spec.remote, greedy=sampling.greedy,
                            progress=lambda m: print(m, file=sys.stderr, flush=True))  # before models load
        self.verify = verify or default_verify_mode(strategy, remote=self.spec.remote)
        self.lossless = is_lossless(strategy, self.verify, sampling)
        self.record_topk = record_topk if log else 0
        self.drafter = load_drafter(drafter, drafter_runtime, quant=quant, max_seq=max_seq)
        self.drafter_runtime = "executorch" if isinstance(self.drafter, ExecuTorchLM) else "eager"
        self.base = self.drafter if self.drafter_runtime == "eager" else None  # the eager drafter as loaded
        self.draft_tok = load_tokenizer(drafter)
        self.target, self.target_tok = load_target(target, sampling=sampling, verify=self.verify,
                                                   dtype=target_dtype, token=token,
                                                   tokenizer=self.spec.target_tokenizer,
                                                   record_topk=self.record_topk, runtime=target_runtime,
                                                   target_model=target_model, target_context=target_context,
                                                   target_engine=target_engine)
        self.target_runtime = ("remote" if self.spec.remote else
                               "executorch" if isinstance(self.target, ExecuTorchLM) else "eager")
        self.pair = PairState(self.draft_tok, self.target_tok, self.drafter.vocab_size, self.target.vocab_size,
                              persist=True)
        if not known:  # registered only once both models loaded
            save_spec(self.spec)
        self.cfg = SpecConfig(strategy, k=k or max_k)
        self.adaptive = SpecConfig(strategy, k=max_k, gamma=gamma) if gamma is not None else None
        self.draft_length = self._draft_length(k, max_k, target_dtype)
        # a serving engine's target, or llama.cpp: hand generation to the engine while it is
        # measured faster (pairs/engine_choice.py); not when the caller fixed k
        self.engine = self._engine(gguf)
        self.engine_choice = (EngineChoice.load(pair_dir(self.spec.name) / "engine.json")
                              if k is None and self.engine is not None else None)
        self.store = adapter_store()
        self.version: str | None = None
        self.head = None
        self.has_head = False
        self.log = VerificationLog(log_path()) if log else None
        self.last: Result | None = None
        self.lookup = LookupConfig() if lookup else None
        self.turns: list[int] = []  # target ids of this conversation's earlier prompts and answers
        self.refresh()

    def _engine(self, gguf):
        """What generates alone when it is faster: llama.cpp on ``gguf``, an OpenAI-API target's
        engine, or nothing."""
        if gguf is not None:
            import torch

            return LlamaCppAlone(gguf, torch.get_num_threads(), stop_ids(self.target_tok, model_eos_ids(self.target)),
                                 self.target_tok)
        return self.target if hasattr(self.target, "stream_alone") else None

    def _draft_length(self, k: int | None, max_k: int, target_dtype: str):
        """FixedK(k), or the cost model's choice for this pair on these runtimes."""
        from omnidraft.decode.draft_length import FixedK
        from omnidraft.pairs.cost import for_pair

        if k is not None:
            return FixedK(k)
        if self.spec.remote:  # its verify cost is the server's and the network's (#21)
            return FixedK(DEFAULT_K)
        dl, self.cost_path, self.cost_on = for_pair(self.spec.name, self.target, self.drafter, target_dtype, max_k)
        return dl

    def save_cost(self) -> None:
        """Keep what this session learned about acceptance for the next one."""
        from omnidraft.decode.draft_length import CostModelK
        from omnidraft.pairs import cost

        dl = self.draft_length
        if isinstance(dl, CostModelK):
            cost.save(self.cost_path, dl.model, dl.reached, dl.accepted, self.cost_on)

    # ------------------------------------------------------------------ adapters
    def refresh(self) -> str | None:
        """Switch to the newest published adapter and head, if there is a newer one."""
        from safetensors.torch import load_file

        from omnidraft.models.acceptance import AcceptanceHead
        from omnidraft.models.eager import CausalLM

        latest = self.store.latest(self.spec.name)
        if latest is None or latest == self.version:
            return self.version
        if self.version is not None:
            self.draft_length.probe_soon()  # a new adapter may draft better
        version_dir = self.store.path(self.spec.name, latest)
        if self.drafter_runtime == "executorch":  # the program: swap the .ptd (LoRA + head), no re-export
            from omnidraft.export.layout import ensure_pair_ptd

            self.drafter.load_adapter(ensure_pair_ptd(self.spec.name, version_dir, self.drafter.info))
            self.has_head = (version_dir / "head.safetensors").is_file()
            self.version = latest
            return latest
        model = self.drafter.model
        if not hasattr(model, "peft_config"):
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(self.store.path(self.spec.name, latest)),
                                              adapter_name=f"{self.spec.name}@{latest}".replace(".", "_"))
            self.drafter = CausalLM(model.eval(), name=self.spec.drafter)
        else:
            self.store.load(model, self.spec.name, latest)
            self.drafter.reset()
        head_file = self.store.path(self.spec.name, latest) / "head.safetensors"
        self.head = AcceptanceHead.from_state(load_file(str(head_file))) if head_file.is_file() else None
        self.has_head = self.head is not None
        self.version = latest
        return latest

    # ------------------------------------------------------------------ generation
    def stream(self, prompt: str, *, max_new_tokens: int = 128, chat: bool = False) -> Generator[str, None, Result]:
        """Yield text as the target commits it; the Result (metrics) is then in ``self.last``."""
        if not prompt.strip():
            raise OmniDraftError("empty prompt")
        self.refresh()
        if self.engine_choice is not None and self.engine_choice.engine_now():
            self.last = yield from self._engine_alone(prompt, max_new_tokens, chat)
            return self.last
        adaptive = self.adaptive is not None and self.has_head  # the head decides each draft's length
        try:
            result = yield from stream_speculative(
                self.drafter, self.target, self.pair, prompt, cfg=self.adaptive if adaptive else self.cfg,
                max_new_tokens=max_new_tokens, sampling=self.sampling, verify_mode=self.verify, chat=chat,
                record_topk=self.record_topk if self.log is not None else 0, head=self.head,
                draft_length=None if adaptive else self.draft_length, lookup=self.lookup, earlier=self.turns)
        finally:
            self.pair.save()
            self.save_cost()
        self.last = result
        if self.lookup is not None:  # the next turn may copy from this one
            self.turns = (self.turns + encode_prompt(self.target_tok, prompt, chat=chat)
                          + result.token_ids)[-self.lookup.max_tokens:]
        if self.engine_choice is not None:
            self.engine_choice.observe(False, result.metrics["new_tokens"], result.metrics["wall_s"])
        if self.log is not None and result.record is not None:
            self.log.append(self.spec.name, prompt, result.record.to_bytes())
        return result

    def _engine_alone(self, prompt: str, max_new_tokens: int, chat: bool) -> Generator[str, None, Result]:
        """The engine generating on its own (one streamed request; its output is its own, so exact);
        no training record (nothing was verified). metrics["engine_alone"] says so."""
        from omnidraft.decode.generate import check_budget
        from omnidraft.decode.metrics import Metrics

        ids = encode_prompt(self.target_tok, prompt, chat=chat)
        alone = yield from self.engine.stream_alone(ids, check_budget(ids, max_new_tokens, self.target))
        self.engine_choice.observe(True, alone.tokens, alone.seconds)
        m = Metrics("engine", new_tokens=alone.tokens, target_forwards=alone.tokens, wall_s=alone.seconds)
        return Result(alone.text, self.target_tok(alone.text, add_special_tokens=False).input_ids,
                      {**m.summary(), "verify": None, "lossless": True, "engine_alone": True}, m)

    def new_conversation(self) -> None:
        """Forget the earlier turns: later generations copy only from their own prompt and output."""
        self.turns = []

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
        """Generations inside the block leave no training record (held-out measurements); they
        skip computing one too (the target's top-k rows cost ~0.4 ms a token)."""
        log, self.log = self.log, None
        try:
            yield self
        finally:
            self.log = log

    def generate(self, prompt: str, **kw) -> Result:
        for _ in self.stream(prompt, **kw):
            pass
        return self.last

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
