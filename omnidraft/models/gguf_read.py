"""Reading a GGUF file with transformers, fast: its tokenizer written once to a directory
(``write_tokenizer``; a user's own GGUF's kept in the home by ``tokenizer_for``, so a Session on
it reads its ~150k-token vocabulary in about a second instead of re-parsing the file), and the
shortcuts its loaders run under (``parsed_once``, ``reported``).

Knows transformers' and gguf-py's GGUF readers; nothing about the catalog or about running models.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
from pathlib import Path
from typing import Callable

from omnidraft.home import subdir


def tokenizer_for(gguf: Path) -> Path:
    """The directory of ``gguf``'s tokenizer, written once per file version (its path, size and
    modification time) under the home's tokenizers/."""
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    dest = subdir("tokenizers") / f"gguf-{key}"
    if (dest / "tokenizer_config.json").is_file():
        return dest
    return write_tokenizer(gguf, dest)


def write_tokenizer(gguf: Path, dest: Path) -> Path:
    """Write ``gguf``'s tokenizer to ``dest`` (atomically: this process's temp folder, then a
    rename; one another process finished first is kept); returns it."""
    from transformers import AutoTokenizer

    from omnidraft.quiet import loading_quietly

    tmp = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with loading_quietly(), parsed_once():
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                      **tokenizer_type(gguf)).save_pretrained(str(tmp))
    if (dest / "tokenizer_config.json").is_file():
        shutil.rmtree(tmp)
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return dest


def tokenizer_type(gguf: Path) -> dict:
    """``tokenizer_type`` for AutoTokenizer when the GGUF's architecture names a tokenizer class
    (qwen2, gemma3: the same files written, 3 s instead of 12 for Qwen's on an AVX2-only EPYC,
    8 instead of 38 for Gemma's), else nothing: without it transformers parses all of the file's
    metadata a second time to build a model config, only to learn that class from it."""
    from transformers.integrations.gguf import read_gguf_metadata
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    arch = read_gguf_metadata(str(gguf))[0].get("general.architecture")
    return {"tokenizer_type": arch} if arch in TOKENIZER_MAPPING_NAMES else {}


@contextlib.contextmanager
def reported(progress: Callable[[str], None]):
    """transformers' GGUF reader draws its own tqdm bar (it ignores disable_progress_bar); report
    its tensor loop through ``progress`` instead, a line per quarter, for the call's duration."""
    from transformers import modeling_gguf_pytorch_utils as reader

    def tensors(items, desc: str = "", **_):
        items = list(items)
        for i, item in enumerate(items):
            if i % max(len(items) // 4, 1) == 0:
                progress(f"dequantising tensors: {i}/{len(items)}")
            yield item

    bar, reader.tqdm = reader.tqdm, tensors
    try:
        yield
    finally:
        reader.tqdm = bar


@contextlib.contextmanager
def parsed_once():
    """Three costs of transformers' GGUF loading that change no weight, cut for the call's
    duration: it parses the file's metadata (every vocabulary string and merge) anew for the
    tokenizer, the config and the tensors; gguf-py's reader slices the file's memmap once per
    metadata item (~6 million numpy memmap slices for Qwen's 151,936 tokens and merges, 17 s on
    an AVX2-only EPYC); and it builds gguf-py's tensor-name table anew for every submodule it
    walks (~400 times for SmolLM2, ~25 ms each). Here each file is parsed once, over a plain
    array view of the same memmap (4 s there), and each (architecture, depth) table built once."""
    import gguf
    import numpy as np

    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple, object] = {}

    class PlainReader(real_reader):  # the memmap as a plain view: same bytes, read-only as it is
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):
            self._plain = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    def reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = PlainReader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(real_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map
