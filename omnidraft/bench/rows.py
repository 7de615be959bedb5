"""The rows a suite compares, behind one protocol: a Row runs one prompt and says what it took.

- ``ProductRow``: the pair through ``Session`` (the product as a user runs it: its cost model,
  copies from the context, the published adapter), never a hand-built pair;
- ``TargetRow``: the target alone through ``Session`` on a given runtime (the same runtime as
  the product's: the first honest alternative);
- ``LlamaCppRow``: the target's GGUF alone on llama.cpp in process (same threads);
- ``AssistedRow``: transformers' assisted generation with the same drafter (heterogeneous
  vocabularies: Universal Assisted Generation), greedy, at a fixed draft length.

Knows the Session, llama.cpp's runner and transformers' generate; nothing about interleaving or
reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from omnidraft.pairs.settings import Runtime
from omnidraft.sampling import SamplingConfig

ASSISTED_TOKENS = 5  # transformers' best setting measured here: 5 tokens a draft, constant (1.07-1.14x its default)


@dataclass(frozen=True)
class Prompt:
    """One prompt of a set: ``text`` through the chat template with ``chat``; ``seed`` for sampled rows."""

    set: str
    text: str
    chat: bool
    seed: int = 0


@dataclass
class Run:
    """What a row's run on one prompt took: new tokens, wall seconds (prefill included), the new
    ids where the row reports them, and its decoding figures (drafted, accepted, forwards)."""

    tokens: int
    seconds: float
    ids: list[int] | None = None
    figures: dict = field(default_factory=dict)


class Row(Protocol):
    name: str

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run: ...


class SessionRow:
    """A row through a ``Session`` (each prompt a conversation of its own); ``sampling``: its sampled mode (None: greedy)."""

    def __init__(self, name: str, session, sampling: SamplingConfig | None = None):
        self.name, self.session, self.sampling = name, session, sampling

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run:
        self.session.new_conversation()  # unrelated prompts: none copies from another's answer
        sampling = None if self.sampling is None else SamplingConfig(self.sampling.temperature, self.sampling.top_p,
                                                                      seed=prompt.seed)
        r = self.session.generate(prompt.text, chat=prompt.chat, max_new_tokens=max_new_tokens, sampling=sampling)
        m = r.metrics
        return Run(m["new_tokens"], m["wall_s"], list(r.token_ids),
                   {"drafted": m.get("proposed") or 0, "accepted": m.get("accepted") or 0,
                    "forwards": m.get("target_forwards") or m["new_tokens"], "runtime": m.get("target_runtime")})


def product(drafter: str, target: str, runtime: Runtime = Runtime()) -> SessionRow:
    """The pair through Session, unlogged (a measurement leaves no training record)."""
    from omnidraft.session import Session

    return SessionRow("omnidraft pair", Session(drafter, target, log=False, runtime=runtime))


def target_alone(target: str, runtime: Runtime) -> SessionRow:
    """The target alone through Session on ``runtime.target`` (the product's, for the same-runtime row)."""
    from omnidraft.session import Session

    return SessionRow(f"target alone ({runtime.target})", Session(None, target, log=False, runtime=runtime))


class LlamaCppRow:
    """The target's packaged GGUF alone on llama.cpp, greedy (None from ``make`` where llama-cpp-python is missing)."""

    name = "llama.cpp target alone"

    def __init__(self, alone, tok):
        self.alone, self.tok = alone, tok

    @classmethod
    def make(cls, target: str, threads: int, log) -> "LlamaCppRow | None":
        from omnidraft.models.catalog import ensure_gguf
        from omnidraft.models.loading import load_tokenizer
        from omnidraft.pairs.llamacpp import INSTALL, LlamaCppAlone

        tok = load_tokenizer(target)
        try:
            alone = LlamaCppAlone(ensure_gguf(target, progress=log), threads, {tok.eos_token_id}, tok, n_ctx=2048)
        except ImportError:
            log(f"llama-cpp-python is not installed ({INSTALL}): no llama.cpp row")
            return None
        return cls(alone, tok)

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run:
        from omnidraft.decode.text import encode_prompt

        n, s = self.alone(encode_prompt(self.tok, prompt.text, chat=prompt.chat), max_new_tokens)
        return Run(n, s)


def assisted(target_hf, drafter_hf, ttok, dtok, prompt_ids: list[int], max_new_tokens: int, eos: list[int],
             tokens: int | None = ASSISTED_TOKENS) -> tuple[list[int], float]:
    """transformers' heterogeneous assisted generation (UAG), greedy: (new ids, seconds).
    ``tokens``: drafted a round at a constant length (None: transformers' default, up to 20 a
    draft, each stopped at a token under its 0.4 confidence threshold)."""
    import torch

    ids = torch.tensor([prompt_ids])
    cfg = drafter_hf.generation_config
    saved = (cfg.num_assistant_tokens, cfg.num_assistant_tokens_schedule)
    if tokens is not None:
        cfg.num_assistant_tokens, cfg.num_assistant_tokens_schedule = tokens, "constant"
    try:
        t0 = time.perf_counter()
        out = target_hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                 do_sample=False, assistant_model=drafter_hf, tokenizer=ttok, assistant_tokenizer=dtok,
                                 eos_token_id=sorted(eos), pad_token_id=ttok.pad_token_id)
        return out[0, len(prompt_ids):].tolist(), time.perf_counter() - t0
    finally:
        cfg.num_assistant_tokens, cfg.num_assistant_tokens_schedule = saved


class AssistedRow:
    """``assisted`` as a row: ``tokens`` drafted a round at a constant length, the target in ``dtype``."""

    def __init__(self, target: str, drafter: str, dtype: str = "bf16", tokens: int = ASSISTED_TOKENS):
        from omnidraft.decode.text import generation_eos_ids
        from omnidraft.models.loading import load_model, load_tokenizer

        self.name = f"transformers assisted generation ({tokens} tokens, constant; {dtype} target)"
        self.ttok, self.dtok, self.tokens = load_tokenizer(target), load_tokenizer(drafter), tokens
        self.target = load_model(target, dtype=dtype).model
        self.drafter = load_model(drafter, dtype="fp32").model
        self.eos = sorted(generation_eos_ids(self.target.generation_config))

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run:
        from omnidraft.decode.text import encode_prompt

        ids = encode_prompt(self.ttok, prompt.text, chat=prompt.chat)
        new, seconds = assisted(self.target, self.drafter, self.ttok, self.dtok, ids, max_new_tokens, self.eos,
                                self.tokens)
        return Run(len(new), seconds, new)
