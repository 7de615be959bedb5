"""The other engines' rows, each the target (or its GGUF) on someone else's runtime, greedy:

- ``LlamaCppRow``: the target's packaged GGUF alone on llama.cpp in process (same threads), and
  with llama-cpp-python's own prompt-lookup drafting (``lookup``);
- ``TransformersRow``: the target alone in transformers, and with its prompt-lookup decoding;
- ``AssistedRow``: transformers' assisted generation with the same drafter (heterogeneous
  vocabularies: Universal Assisted Generation) at a fixed draft length (its best setting here).

Knows llama.cpp's runner (pairs/llamacpp.py) and transformers' ``generate``; nothing about
OmniDraft's decoding, interleaving or reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

from omnidraft.bench.rows import Prompt, Run

ASSISTED_TOKENS = 5  # transformers' best setting measured here: 5 tokens a draft, constant (1.07-1.14x its default)
LOOKUP_TOKENS = 10  # prompt lookup's tokens a draft, llama-cpp-python's and transformers' (their docs' setting)


class LlamaCppRow:
    """The target's packaged GGUF on llama.cpp, greedy; with ``lookup``, llama-cpp-python's
    LlamaPromptLookupDecoding (3-grams, LOOKUP_TOKENS a draft). ``make`` returns None where
    llama-cpp-python is not installed."""

    samples = False

    def __init__(self, alone, tok, lookup: bool, log):
        self.alone, self.tok, self.log = alone, tok, log
        self.name = ("llama.cpp prompt lookup (LlamaPromptLookupDecoding, 3 / "
                     f"{LOOKUP_TOKENS})") if lookup else "llama.cpp target alone"

    @classmethod
    def make(cls, target: str, threads: int, log, *, lookup: bool = False) -> "LlamaCppRow | None":
        from omnidraft.models.catalog import ensure_gguf
        from omnidraft.models.loading import load_tokenizer
        from omnidraft.pairs.llamacpp import INSTALL, LlamaCppAlone

        tok = load_tokenizer(target)
        try:
            draft = None
            if lookup:
                from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

                draft = LlamaPromptLookupDecoding(max_ngram_size=3, num_pred_tokens=LOOKUP_TOKENS)
            alone = LlamaCppAlone(ensure_gguf(target, progress=log), threads, {tok.eos_token_id}, tok, n_ctx=2048,
                                  draft_model=draft)
        except ImportError:
            log(f"llama-cpp-python is not installed ({INSTALL}): no llama.cpp row")
            return None
        return cls(alone, tok, lookup, log)

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run:
        ids, n, t0 = prompt.ids(self.tok), 0, time.perf_counter()
        try:
            for tok in self.alone.llm.generate(ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
                n += 1
                if tok in self.alone.stop or n >= max_new_tokens:
                    break
        except ValueError as err:  # its prompt lookup's scores buffer fails on some prompts (LLAMACPP.md)
            self.log(f"{self.name} stopped early on a prompt ({err}): its tokens so far counted")
        return Run(n, time.perf_counter() - t0)


@dataclass(frozen=True)
class _HF:
    """A transformers model with its tokenizer and end-of-generation ids."""

    tok: object
    model: object
    eos: list[int]


@lru_cache(maxsize=4)
def _hf(name: str, dtype: str) -> _HF:
    """``name`` in transformers, loaded once per process however many rows use it (the copy suite's
    three transformers rows share one target)."""
    from omnidraft.decode.text import generation_eos_ids
    from omnidraft.models.loading import load_model, load_tokenizer

    tok, model = load_tokenizer(name), load_model(name, dtype=dtype).model
    return _HF(tok, model, sorted(generation_eos_ids(model.generation_config) or {tok.eos_token_id}))


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

    samples = False

    def __init__(self, target: str, drafter: str, dtype: str = "bf16", tokens: int = ASSISTED_TOKENS):
        self.name = f"transformers assisted generation ({tokens} tokens, constant; {dtype} target)"
        self.target, self.drafter, self.tokens = _hf(target, dtype), _hf(drafter, "fp32"), tokens

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run:
        t, d = self.target, self.drafter
        new, seconds = assisted(t.model, d.model, t.tok, d.tok, prompt.ids(t.tok), max_new_tokens, t.eos, self.tokens)
        return Run(len(new), seconds, new)


class TransformersRow:
    """The target alone in transformers (``dtype``), greedy; with ``lookup``, its prompt-lookup
    decoding (LOOKUP_TOKENS a draft)."""

    samples = False

    def __init__(self, target: str, dtype: str = "bf16", lookup: bool = False):
        self.name = (f"transformers prompt lookup ({dtype}, {LOOKUP_TOKENS} tokens)" if lookup
                     else f"transformers target alone ({dtype})")
        self.hf, self.lookup = _hf(target, dtype), lookup

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run:
        import torch

        hf, ids = self.hf, prompt.ids(self.hf.tok)
        x = torch.tensor([ids])
        t0 = time.perf_counter()
        out = hf.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens, do_sample=False,
                                eos_token_id=hf.eos, pad_token_id=hf.eos[0],
                                 **({"prompt_lookup_num_tokens": LOOKUP_TOKENS} if self.lookup else {}))
        seconds = time.perf_counter() - t0
        return Run(out.shape[1] - len(ids), seconds, out[0, len(ids):].tolist())
