"""The target alone on llama.cpp, in process: the model's packaged GGUF run by llama-cpp-python
(the optional ``llamacpp`` extra) through its own generation loop, greedy, on this process's
thread count, prompt evaluation included, tokens counted as the target alone counts them (a stop
token included): the comparison row of `omnidraft pair`, the demo and the benchmarks. And where a
model reference's GGUF is, for that row and for the llama.cpp target runtime (device/llamacpp.py).

Knows llama-cpp-python's ``Llama`` and the catalog's GGUF files; nothing about OmniDraft's decoding.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Generator

from omnidraft.decode.text import Alone, Detokenizer, drained
from omnidraft.device.llamacpp import INSTALL, eog_ids
from omnidraft.errors import OmniDraftError



class LlamaCppAlone:
    """Greedy generation on ``gguf`` with llama.cpp, stopping after a token in ``stop`` (counted)
    or the budget; ``tok`` (the target's tokenizer) turns the ids into text. llama.cpp keeps the
    longest prefix its cache shares with the previous prompt, as the target alone on OmniDraft's
    runtime does."""

    def __init__(self, gguf: Path, threads: int, stop: set[int], tok, n_ctx: int = 2048, draft_model=None):
        """``n_ctx``: llama.cpp's context, the most prompt and new tokens one generation may hold;
        ``draft_model``: llama-cpp-python's own drafting (its prompt lookup, for a baseline)."""
        from llama_cpp import Llama

        self.gguf, self.tok, self.n_ctx = Path(gguf), tok, n_ctx
        self.llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                         verbose=False, draft_model=draft_model)
        self.stop = set(stop) | eog_ids(self.llm)

    def close(self) -> None:
        """Free the model and its context now (the GGUF's mapping, the caches)."""
        self.llm.close()

    def stream_alone(self, prompt_ids: list[int], max_new_tokens: int) -> Generator[str, None, Alone]:
        """Yield the text as llama.cpp generates it; return the whole (a Session's engine protocol)."""
        if len(prompt_ids) + max_new_tokens > self.n_ctx:
            raise OmniDraftError(f"llama.cpp: {len(prompt_ids)} prompt + {max_new_tokens} new tokens exceed "
                                 f"its context of {self.n_ctx}", "shorten the prompt or ask for fewer tokens")
        t0, ids, sent = time.perf_counter(), [], []
        text = Detokenizer(self.tok, prompt_ids)
        for tok in self.llm.generate(prompt_ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
            ids.append(tok)
            piece = text.push([tok])
            if piece:
                sent.append(piece)
                yield piece
            if tok in self.stop or len(ids) >= max_new_tokens:
                break
        seconds = time.perf_counter() - t0
        whole = self.tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        rest = whole[len("".join(sent)):]
        if rest:  # a character the detokenizer held back
            yield rest
        return Alone(whole, len(ids), seconds)

    def __call__(self, prompt_ids: list[int], new: int) -> tuple[int, float]:
        """(tokens generated, seconds): the benchmarks' run convention."""
        alone = drained(self.stream_alone(prompt_ids, new))
        return alone.tokens, alone.seconds


def gguf_of(ref: str, progress: Callable[[str], None]) -> Path | None:
    """The GGUF a model reference runs from: a catalog model's packaged file (sha256-checked), a
    ``.gguf`` path itself; None for a Hugging Face directory or a URL (nothing to compare with)."""
    from omnidraft.models import catalog

    if ref.endswith(".gguf"):
        return Path(ref).expanduser()
    if ref in catalog.CATALOG:
        return catalog.ensure_gguf(ref, progress=progress)
    return None


def llamacpp_gguf(ref: str, progress: Callable[[str], None]) -> Path:
    """The GGUF llama.cpp would run for ``ref``; a one-line error when llama-cpp-python is not
    installed or ``ref`` has no GGUF (checked before any model loads)."""
    try:
        import llama_cpp  # noqa: F401 - only whether the extra is installed
    except ImportError:
        raise OmniDraftError("llama.cpp: llama-cpp-python is not installed", INSTALL) from None
    gguf = gguf_of(ref, progress)
    if gguf is None:
        raise OmniDraftError(f"llama.cpp: {ref} has no GGUF to run", "pass a catalog name or a .gguf target")
    return gguf


def llamacpp_engine(ref: str, stop: set[int], tok, progress: Callable[[str], None], n_ctx: int = 2048) -> LlamaCppAlone:
    """``ref``'s GGUF on llama.cpp, on torch's thread count (the programs' count:
    device/threads.py), with a context of ``n_ctx`` tokens."""
    import torch

    return LlamaCppAlone(llamacpp_gguf(ref, progress), torch.get_num_threads(), stop, tok, n_ctx)
