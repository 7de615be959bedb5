"""The target alone on llama.cpp: the baseline a user compares the pair with. The model's packaged
GGUF run by llama-cpp-python (the optional ``llamacpp`` extra), greedy, on this process's thread
count, prompt evaluation included, tokens counted as the target alone counts them (a stop token
included). The demo and `omnidraft pair` print the pair against it beside the target alone on
OmniDraft's runtime; the benchmarks' llama.cpp rows are the same runner.

Knows llama-cpp-python's ``Llama`` and where a model reference's GGUF is; nothing about
OmniDraft's decoding.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

INSTALL = "pip install -e '.[llamacpp]', with the README's build settings: ~4 min"


class LlamaCppAlone:
    """``run(prompt ids, new tokens) -> (tokens generated, seconds)`` on ``gguf``: greedy, stopping
    after a token in ``stop`` (counted) or ``new`` tokens. llama.cpp keeps the longest prefix its
    cache shares with the previous prompt, as the target alone on OmniDraft's runtime does."""

    def __init__(self, gguf: Path, threads: int, stop: set[int], n_ctx: int = 2048):
        from llama_cpp import Llama

        self.gguf = Path(gguf)
        self.llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                         verbose=False)
        self.stop = set(stop) | {self.llm.token_eos()}

    def __call__(self, ids: list[int], new: int) -> tuple[int, float]:
        t0, n = time.perf_counter(), 0
        for tok in self.llm.generate(ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
            n += 1
            if tok in self.stop or n >= new:
                break
        return n, time.perf_counter() - t0


def gguf_of(ref: str, progress: Callable[[str], None]) -> Path | None:
    """The GGUF a model reference runs from: a catalog model's packaged file (sha256-checked), a
    ``.gguf`` path itself; None for a Hugging Face directory or a URL (nothing to compare with)."""
    from omnidraft.models import catalog

    if ref.endswith(".gguf"):
        return Path(ref).expanduser()
    if ref in catalog.CATALOG:
        return catalog.ensure_gguf(ref, progress=progress)
    return None


def llamacpp_alone(ref: str, stop: set[int], say: Callable[[str], None]) -> LlamaCppAlone | None:
    """The runner for ``ref`` on torch's thread count (the programs' count: device/threads.py), or
    None after one line saying why there is no llama.cpp row (not installed, no GGUF)."""
    import torch

    try:
        import llama_cpp  # noqa: F401 - only whether the extra is installed
    except ImportError:
        say(f"llama.cpp: llama-cpp-python is not installed, so no llama.cpp row ({INSTALL})")
        return None
    gguf = gguf_of(ref, say)
    if gguf is None:
        say(f"llama.cpp: {ref} has no GGUF, so no llama.cpp row")
        return None
    return LlamaCppAlone(gguf, torch.get_num_threads(), stop)
