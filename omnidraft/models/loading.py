"""Resolve a model reference (catalog name, local HF directory, or .gguf path) and load it.

Knows where weights live and how to load them on CPU; nothing about decoding.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from omnidraft.errors import OmniDraftError

DTYPES = ("fp32", "bf16")


def resolve(ref: str, *, fetch_missing: bool = True) -> tuple[Path, str | None]:
    """(directory, gguf file name or None) for a model reference."""
    from omnidraft.models import catalog

    if not ref or not ref.strip():
        raise OmniDraftError("empty model reference", "pass a catalog name or a model path")
    path = Path(ref).expanduser()
    if ref.endswith(".gguf"):
        if not path.is_file():
            raise OmniDraftError(f"GGUF file not found: {path}", "check the path")
        return path.parent, path.name
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise OmniDraftError(f"{path} is not a Hugging Face model directory (no config.json)",
                                 "pass a directory written by save_pretrained, a .gguf file or a catalog name")
        return path, None
    if ref in catalog.CATALOG:
        if not catalog.is_fetched(ref) and not fetch_missing:
            raise OmniDraftError(f"model '{ref}' is not fetched", f"run `omnidraft models fetch {ref}`")
        return catalog.fetch(ref), None
    if os.sep in ref or ref.startswith("."):
        raise OmniDraftError(f"model path not found: {ref}", "check the path")
    catalog.spec_for(ref)  # raises the unknown-model error with the list of names
    raise AssertionError("unreachable")


def load_tokenizer(ref: str):
    """The tokenizer of a model reference (a catalog model's without fetching its weights; a GGUF
    file's written once to the home: models/gguf_read.py)."""
    from transformers import AutoTokenizer

    from omnidraft.models import catalog, gguf_read

    directory, gguf = (catalog.tokenizer_dir(ref), None) if ref in catalog.CATALOG else resolve(ref)
    if gguf:
        directory = gguf_read.tokenizer_for(directory / gguf)
    tok = AutoTokenizer.from_pretrained(str(directory))
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None and type(backend.model).__name__ == "BPE":
        # transformers ignores this clean-up for BPE tokenizers, with a warning on every first
        # decode: off, the text is the same and the user's output stays clean
        tok.clean_up_tokenization_spaces = False
    if backend is not None:  # the vocabulary and merges the Rust tokenizer was built from, kept as
        # Python objects that nothing reads again (transformers' Qwen2, Llama, GPT-2, Gemma
        # classes): Qwen2's hold 66 MiB
        for name in ("_vocab", "_merges"):
            tok.__dict__.pop(name, None)
    return tok


def load_model(ref: str, *, dtype: str = "fp32"):
    """A ``CausalLM`` (see models/eager.py) on CPU, in fp32 or bf16."""
    import torch
    from transformers import AutoModelForCausalLM

    from omnidraft.models import catalog, gguf_read
    from omnidraft.models.eager import CausalLM
    from omnidraft.quiet import loading_quietly

    if dtype not in DTYPES:
        raise OmniDraftError(f"unknown dtype '{dtype}'", f"choose one of {', '.join(DTYPES)}")
    directory, gguf = resolve(ref)
    kwargs = {"gguf_file": gguf} if gguf else {}
    # a GGUF file is dequantised on every load: its parsing shortcuts, and progress lines for its bar
    parsed = gguf_read.parsed_once() if gguf else contextlib.nullcontext()
    reported = gguf_read.reported(catalog.progress_line) if gguf else contextlib.nullcontext()
    # Load fp32, then cast: passing dtype=bf16 with GGUF dequantisation misleads transformers.
    with loading_quietly(), parsed, reported:
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32, **kwargs)
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    return CausalLM(model, name=ref)
