"""ExecuTorchLM: an exported program (.pte + a .ptd), drafter or target, behind the same
interface as the eager ``CausalLM`` (the ``LM`` protocol, models/lm.py), so the decode loop runs
unchanged on it: as the proposer's drafter, or under ``LocalTarget`` as the verifier.

Knows the ExecuTorch runtime, the program's static cache and program.json; nothing about
tokenizers, strategies or training.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from omnidraft.errors import OmniDraftError
from omnidraft.export.adapter_data import check_ptd
from omnidraft.export.info import ProgramInfo
from omnidraft.mapped_files import drop, mappings
from omnidraft.models import lm as lm_ops
from omnidraft.models.lm import Forward

from . import kv_state
from .et_runtime import runtime
from .page_locks import unlocked
from .threads import ensure_pool, program_call
from .weight_sharing import load_shared


class ExecuTorchLM:
    """One loaded program. ``length`` tokens are in its static cache; a rollback only moves the
    write position (the program attends only to positions before the one it writes).

    A target program may hold a second method, ``decode``: one token, attending to the first
    ``info.decode_window`` cache slots only; ``extend`` uses it while the context fits.

    ``extend`` returns logits, the last hidden state [1, H] and the head's P(accept) of the
    greedy next token [1]. A target program returns every position's logits [k, V] (the last
    one's with ``last_only``: a prefill computes one LM-head row); a drafter's returns the last
    position's only, so its multi-token calls need ``last_only``.
    """

    scores_accept = True  # the program's third output is the acceptance head's P(accept)

    def __init__(self, program_dir: str | Path, ptd: str | Path | None = None, name: str = ""):
        self.dir = Path(program_dir)
        if not (self.dir / "program.pte").is_file():
            raise OmniDraftError(f"no ExecuTorch program in {self.dir}", "run `omnidraft export` first")
        self.info = ProgramInfo.load(self.dir / "program.json")
        self.name = name or self.info.config["drafter"]
        self.tokens: list[int] = []
        self.ptd: Path | None = None
        self.program = self.method = self.decode = None
        self.load_seconds = 0.0
        ensure_pool()
        self.load_adapter(ptd or self.dir / "base.ptd")

    # ------------------------------------------------------------------ properties
    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def max_length(self) -> int:
        return self.info.max_seq

    @property
    def vocab_size(self) -> int:
        return self.info.vocab_size

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    @property
    def eos_ids(self) -> set[int]:
        return set(self.info.eos_ids)

    def twin(self) -> "ExecuTorchLM":
        """This program loaded again with the adapter it runs: its own empty cache (a second
        conversation slot, models/slots.py)."""
        return ExecuTorchLM(self.dir, self.ptd, self.name)

    # ------------------------------------------------------------------ adapters
    def load_adapter(self, ptd: str | Path) -> None:
        """Run with the LoRA + head weights of ``ptd`` (checked against program.json first).
        The cache restarts empty. One program is in memory at a time: the running one is released
        before the next loads (a swap would otherwise hold two copies of the weights, +320 MB for
        SmolLM2's 8da8w program); if the next fails to load, the running adapter is loaded again
        and the error raised (also where the caller released it: models/slots.py)."""
        ptd, running = Path(ptd), self.ptd
        try:
            if not ptd.is_file():
                raise OmniDraftError(f"adapter file not found: {ptd}", "run `omnidraft export-adapter`")
            check_ptd(ptd, self.info)
            self.release()
            self._load(ptd)
        except OmniDraftError:
            if self.program is None and running is not None:  # released (here or by the caller)
                self._load(running)
            raise

    def release(self) -> None:
        """Free the loaded program (its packed weights and caches); the next ``load_adapter`` loads
        one again, or, if that fails, the adapter that ran before."""
        self.tokens = []
        self.method = self.decode = None
        self.program = None  # last: its lifetime is what device/weight_sharing.py watches

    def _load(self, ptd: Path) -> None:
        """Load program.pte with ``ptd``'s weights and both its methods."""
        t0 = time.perf_counter()
        # one packed copy of each weight for both methods and every twin where no load of this
        # program alive runs another adapter (device/weight_sharing.py; the 1.5B target alone:
        # 5.17 -> 3.68 GB resident, load 25 -> 10 s, the same ids and decode speed)
        def load():
            with unlocked():  # the file's pages read in as calls touch them (device/page_locks.py)
                program = runtime().load_program(str(self.dir / "program.pte"), data_path=str(ptd))
                # both methods share the caches; load every one now (loading one initialises them)
                return (program, program.load_method("forward"),
                        program.load_method("decode") if self.info.decode_window else None)

        try:
            # the keys XNNPACK reads (content keys); a value read by name (its FQN) is not packed
            keys = {k for fqn, held in self.info.ptd_keys.items() for k in held if k != fqn}
            program, method, decode = load_shared(keys, ptd, load, lambda loaded: loaded[0])
        except (RuntimeError, ValueError) as err:
            raise OmniDraftError(f"ExecuTorch could not load {self.dir / 'program.pte'} with {ptd}: {err}",
                                 "re-export the program with this executorch version (it needs the "
                                 "LLM custom ops and, when quantised, the quantized kernels)") from err
        self.program, self.method, self.decode, self.ptd = program, method, decode, ptd
        # what XNNPACK did not pack stays mapped from the file (the 8-bit token embedding: 0.23 GB
        # of the 1.5B's, in each twin's mapping); any page of it the load read in is handed back to
        # the page cache, and only the rows a call reads come back
        pte = os.path.realpath(self.dir / "program.pte")
        drop(mappings(lambda path: path == pte))
        self.load_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------------ cache control
    def reset(self) -> None:
        self.tokens = []

    def input_embeddings(self) -> None:
        return None  # the program scores acceptance itself (scores_accept)

    def rollback(self, n: int) -> None:
        lm_ops.check_rollback(n, self.length)
        if n:
            del self.tokens[-n:]

    def truncate(self, length: int) -> None:
        self.rollback(self.length - length)

    # ------------------------------------------------------------------ conversation state
    @property
    def stateful(self) -> bool:
        """A conversation's state can be saved and restored here (a program exported with its
        caches' names: device/kv_state.py)."""
        return self.method is not None and kv_state.named(self.method)

    @property
    def weights(self) -> str:
        """What computes this program's caches: the program and the .ptd it runs."""
        return f"{self.info.program_id}:{self.ptd}"

    def state(self) -> kv_state.KVState:
        """This conversation: the ids in the cache and their cache positions, copied out."""
        return kv_state.save(self.method, self.max_length, self.tokens, self.weights)

    def restore(self, state: kv_state.KVState) -> None:
        """Continue from ``state`` (``state()`` of this program with this adapter), as if its ids
        had been read again."""
        kv_state.restore(self.method, self.max_length, state, self.weights)
        self.tokens = list(state.ids)

    # ------------------------------------------------------------------ forward
    def extend(self, ids: list[int], *, hidden: bool = False, last_only: bool = False) -> Forward:
        k = len(ids)
        if k == 0:
            raise ValueError("extend needs at least one token")
        every = self.info.role == "target"
        if k > 1 and not last_only and not every:
            raise OmniDraftError("the exported drafter returns the last position's logits only",
                                 "pass last_only=True or feed one token at a time")
        if self.length + k > self.max_length:
            raise OmniDraftError(
                f"{self.name}: {self.length + k} tokens exceed the program's cache of {self.max_length}",
                "shorten the prompt or generation, or re-export with a larger --max-seq")
        rows = self.info.max_rows or self.max_length
        if every and not last_only and k > rows:  # more positions' logits than a call returns: in pieces
            parts = [self.extend(ids[i:i + rows], hidden=hidden) for i in range(0, k, rows)]
            cat = lambda name: None if getattr(parts[0], name) is None else torch.cat([getattr(p, name) for p in parts])
            return Forward(logits=cat("logits"), hidden=cat("hidden"), accept=parts[-1].accept)
        width = self.info.max_width or self.max_length
        if k > width:  # more tokens than a call reads (only the last position's logits asked): in pieces
            last = k - (k - 1) % width - 1  # where the last piece starts
            for i in range(0, last, width):
                self.extend(ids[i:i + width], last_only=True)
            return self.extend(ids[last:], hidden=hidden, last_only=True)
        inputs = [torch.tensor([ids], dtype=torch.long),  # [1, k]
                  torch.tensor([self.length], dtype=torch.long)]  # [1]
        if every:  # [R]: the positions whose logits the program computes
            inputs.append(torch.tensor([k - 1]) if last_only else torch.arange(k))
        # one token while the context fits the window: the method reading only the first window
        # slots (the same bits as forward's, a shorter attention)
        fits = k == 1 and self.decode is not None and self.length < self.info.decode_window
        with program_call():
            logits, hid, accept = (self.decode if fits else self.method).execute(inputs)  # logits [k or 1, V]
        self.tokens.extend(int(t) for t in ids)
        return Forward(logits=logits, hidden=hid if hidden else None, accept=accept)

    def prefill(self, ids: list[int], *, hidden: bool = False) -> Forward:
        return lm_ops.prefill(self, ids, hidden=hidden)

    def sync(self, ids: list[int], *, hidden: bool = False) -> Forward:
        return lm_ops.sync(self, ids, hidden=hidden)
