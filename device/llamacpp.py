"""LlamaCppLM: a GGUF run by llama.cpp (llama-cpp-python's low-level API, the optional
``llamacpp`` extra) behind the ``LM`` protocol (models/lm.py), so a user's own GGUF verifies
with no conversion and no export: one batch per ``extend`` asks for logits only at the positions
it returns, and ``rollback`` removes the newest positions from the KV cache
(``llama_memory_seq_rm``). The file is read, not memory-mapped: llama.cpp repacks most
weight types into its own layout as it loads them, so a mapped file would stay resident beside
the repacked copy (measured on the 1.5B's 1.04 GiB Q4_K_M file: +1.79 GiB mapped, +1.21 GiB read,
the same 34 ms a token).

Exactness: llama.cpp's multi-token calls are not batch-invariant (its repacked and tinyBLAS
kernels take several rows at once where a one-token call takes one), so a position's logits can
differ a little between call widths. Decoding on this runtime is exact with respect to the logits
its verify calls compute, not bit-for-bit its own one-token-at-a-time output
(scripts/bench_llamacpp.py measures how often they differ).

A conversation's state (device/kv_state.py KVState, kept by device/saved_states.py) is sequence
0's, as llama.cpp serialises it (``llama_state_seq_get_data``): one uint8 blob in ``keys`` and no
``values``, restored into a load of the same file, llama.cpp build and context size.

Knows llama-cpp-python's ctypes API; nothing about tokenizers, strategies or training.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import torch

from omnidraft.errors import OmniDraftError
from omnidraft.models import lm as lm_ops
from omnidraft.models.lm import Forward

from .kv_state import KVState
from .threads import native_stderr_without

INSTALL = "pip install -e '.[llamacpp]', with the README's build settings: ~4 min"
BATCH = 128  # tokens per llama_decode call (a longer prompt goes in pieces): its logits buffer is BATCH x vocab
LOG_PREFIXES = ("llama_", "ggml_", "load", "print_info")  # llama.cpp's log lines, kept off the terminal


class LlamaCppLM:
    """One GGUF with one KV cache of ``n_ctx`` positions, on ``threads`` threads. ``length``
    tokens are in the cache; each ``extend`` is one llama_decode per BATCH tokens."""

    scores_accept = False  # no acceptance head runs here
    stateful = True  # a conversation's state can be saved and restored (``state``, ``restore``)

    def __init__(self, gguf: str | Path, *, n_ctx: int = 1024, threads: int = 1, name: str = ""):
        try:
            import llama_cpp
        except ImportError:
            raise OmniDraftError("llama.cpp: llama-cpp-python is not installed", INSTALL) from None
        self.gguf = Path(gguf)
        if not self.gguf.is_file():
            raise OmniDraftError(f"GGUF file not found: {self.gguf}", "check the path")
        self._ll = llama_cpp
        try:
            with native_stderr_without(LOG_PREFIXES):  # its notes to its own developers, as verbose=False means
                self.llm = llama_cpp.Llama(model_path=str(self.gguf), n_ctx=n_ctx, n_batch=BATCH, n_ubatch=BATCH,
                                           n_threads=threads, n_threads_batch=threads, use_mmap=False, verbose=False)
        except ValueError as err:
            raise OmniDraftError(f"llama.cpp cannot load {self.gguf}: {err}") from None
        self.name = name or self.gguf.stem
        self.runtime = f"llama.cpp {self._describe()}"
        self.ctx = self.llm._ctx.ctx
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.vocab = self.llm.n_vocab()
        self.n_ctx = self.llm.n_ctx()
        self.eos_ids = eog_ids(self.llm)
        self.batch = llama_cpp.llama_batch_init(BATCH, 0, 1)
        self.tokens: list[int] = []
        st = self.gguf.stat()  # the file as loaded: a state is restored only into a load of the same one
        self._weights = (f"{self.gguf.resolve()}:{st.st_size}:{st.st_mtime_ns}:n_ctx {self.n_ctx}"
                         f":llama.cpp {llama_cpp.__version__}")

    def __del__(self):
        batch = getattr(self, "batch", None)
        if batch is not None:
            self._ll.llama_batch_free(batch)

    # ------------------------------------------------------------------ properties
    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def max_length(self) -> int:
        return self.n_ctx

    @property
    def vocab_size(self) -> int:
        return self.vocab

    def input_embeddings(self) -> None:
        return None

    # ------------------------------------------------------------------ cache control
    def rollback(self, n: int) -> None:
        lm_ops.check_rollback(n, self.length)
        if n:
            self._ll.llama_memory_seq_rm(self.mem, 0, self.length - n, -1)
            del self.tokens[-n:]

    def truncate(self, length: int) -> None:
        self.rollback(self.length - length)

    def reset(self) -> None:
        self.rollback(self.length)

    # ------------------------------------------------------------------ conversation state
    @property
    def weights(self) -> str:
        """What computes this cache: the GGUF as loaded (path, size, modification time), the context
        size and the llama.cpp build (whose format the state is in); no hashing."""
        return self._weights

    def state(self) -> KVState:
        """This conversation: the ids in the cache and sequence 0's state, copied out."""
        size = self._ll.llama_state_seq_get_size(self.ctx, 0)
        blob = torch.empty(size, dtype=torch.uint8)  # [size] llama.cpp's serialised sequence
        got = self._ll.llama_state_seq_get_data(self.ctx, _bytes(blob), size, 0)
        if got != size:
            raise OmniDraftError(f"llama.cpp copied {got} of its {size}-byte conversation state")
        return KVState(self.weights, tuple(self.tokens), (blob,), ())

    def restore(self, state: KVState) -> None:
        """Continue from ``state`` (``state()`` of a load of this GGUF), as if its ids had been read
        again; on an error the cache is empty."""
        if state.weights != self.weights:
            raise OmniDraftError("a saved conversation state is from another GGUF, context size or llama.cpp build",
                                 f"it was computed by {state.weights}, not {self.weights}")
        self.reset()
        blob = state.keys[0].contiguous()  # [size] uint8, as state() copied it out
        if self._ll.llama_state_seq_set_data(self.ctx, _bytes(blob), blob.numel(), 0) == 0:  # it cleared seq 0
            raise OmniDraftError(f"llama.cpp could not restore a saved conversation state of {len(state.ids)} tokens")
        self.tokens = list(state.ids)

    # ------------------------------------------------------------------ forward
    def extend(self, ids: list[int], *, hidden: bool = False, last_only: bool = False) -> Forward:
        """Append ``ids`` to the cache; logits [k, V] float32 (or [1, V] with ``last_only``).
        On any error the cache is as it was."""
        if not ids:
            raise ValueError("extend needs at least one token")
        if hidden:
            raise OmniDraftError("llama.cpp returns no hidden states here", "use the ExecuTorch or eager runtime")
        if self.length + len(ids) > self.n_ctx:
            raise ValueError(f"{self.name}: {self.length + len(ids)} tokens exceed the context window of {self.n_ctx}")
        if any(not 0 <= t < self.vocab for t in ids):
            raise ValueError(f"ids must be in 0..{self.vocab - 1}")
        start, rows = self.length, []
        try:
            for at in range(0, len(ids), BATCH):
                piece = ids[at:at + BATCH]
                want = [not last_only or at + i == len(ids) - 1 for i in range(len(piece))]
                rows += self._decode(piece, start + at, want)
        except BaseException:
            self._ll.llama_memory_seq_rm(self.mem, 0, start, -1)
            raise
        self.tokens.extend(int(t) for t in ids)
        return Forward(logits=torch.from_numpy(np.stack(rows)))

    def _decode(self, ids: list[int], pos: int, want: list[bool]) -> list[np.ndarray]:
        """One llama_decode of ``ids`` at positions pos.. ; the [V] logits of each wanted one."""
        b = self.batch
        b.n_tokens = len(ids)
        for i, t in enumerate(ids):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, pos + i, 1, want[i]
            b.seq_id[i][0] = 0
        rc = self._ll.llama_decode(self.ctx, b)
        if rc != 0:
            raise OmniDraftError(f"llama.cpp could not evaluate {len(ids)} tokens (llama_decode returned {rc})")
        return [np.ctypeslib.as_array(ctypes.cast(self._ll.llama_get_logits_ith(self.ctx, i),
                                                  ctypes.POINTER(ctypes.c_float)), shape=(self.vocab,)).copy()
                for i, w in enumerate(want) if w]

    def _describe(self) -> str:
        """The model as llama.cpp names it: architecture, size and weight type."""
        buf = ctypes.create_string_buffer(128)
        self._ll.llama_model_desc(self.llm._model.model, buf, len(buf))
        return buf.value.decode(errors="replace")

    def prefill(self, ids: list[int], *, hidden: bool = False) -> Forward:
        return lm_ops.prefill(self, ids, hidden=hidden)

    def sync(self, ids: list[int], *, hidden: bool = False) -> Forward:
        return lm_ops.sync(self, ids, hidden=hidden)


def _bytes(blob: torch.Tensor):
    """A ctypes uint8 pointer to ``blob``'s memory (a contiguous [n] uint8 tensor: keep it alive through the call)."""
    return ctypes.cast(blob.data_ptr(), ctypes.POINTER(ctypes.c_uint8))


def eog_ids(llm) -> set[int]:
    """Every id a llama-cpp-python ``Llama``'s model ends generation with (llama.cpp's own stop
    set: the GGUF's EOS and EOT and the special tokens it recognises as ends)."""
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    return {i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, i)}
