"""Lower a program's two methods on both cores: this process lowers the first, a forked child the
second, and the child's lowered edge program comes back through ExecuTorch's serialisation.

A target program has two methods (``forward`` and the one-token ``decode``) whose export,
decomposition, edge generation and partitioning are independent retraces of the whole model.
``lower_methods`` runs them side by side. The child saves its lowered method with
``executorch.exir.serde`` (graph, delegates and their processed bytes) without the bulk this
process already holds: each delegate's named data (XNNPACK's weights, the same bytes the first
method's delegates carry) travels as a sha256 digest and is filled back from this process's own
method, and each delegate's original partition keeps its weights' shapes only (nothing reads
them after lowering). Any digest this process cannot fill, a failed child, one method, one core
or no ``os.fork``: the methods are lowered here, XNNPACK's partitions then on two cores. The
program's bytes are the same either way (the test compares them).

Knows ExecuTorch's serialisation, its lowered-module layout and os.fork; nothing about models.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from omnidraft.heap import trim

from .two_cores import preprocess_on_two_cores

Lowered = dict  # method name -> its lowered edge-dialect ExportedProgram
BULK = 4096  # named data of at least this many bytes travels as its digest


def lower_methods(names: list[str], lower: Callable[[list[str]], Lowered]) -> Lowered:
    """``lower(names)`` of every method in ``names``; with two methods, the second in a forked
    child. The result keeps ``names``' order."""
    if len(names) != 2 or (os.cpu_count() or 1) < 2 or not hasattr(os, "fork"):
        return _here(names, lower)
    mine, theirs = names
    with tempfile.TemporaryDirectory(prefix="omnidraft-export-") as tmp:
        path = Path(tmp) / f"{theirs}.pt2"
        parent, pid = os.getpid(), os.fork()
        if pid == 0:  # the child: never returns into the caller's stack
            status = 1
            try:
                _die_with(parent)
                import torch

                torch.set_num_threads(1)  # the parent's OpenMP team is not forked: its first use would hang
                _save(lower([theirs])[theirs], path)
                status = 0
            finally:
                os._exit(status)
        try:
            done = lower([mine])
        except BaseException:  # ours failed or was interrupted: the child's method is not wanted
            os.kill(pid, signal.SIGKILL)
            raise
        finally:  # always collected
            _, status = os.waitpid(pid, 0)
        trim()  # what lowering ours freed goes back before the child's method is read in
        try:
            got = _load(path, done[mine]) if status == 0 and path.exists() else None
        except Exception:  # noqa: BLE001 - a program serde cannot read back: lowered here instead
            got = None
    if got is None:  # what the child could not do, or what this process cannot complete
        got = _here([theirs], lower)[theirs]
    return {mine: done[mine], theirs: got}


def _here(names: list[str], lower: Callable[[list[str]], Lowered]) -> Lowered:
    """``lower(names)`` in this process, XNNPACK's partitions on two cores."""
    with preprocess_on_two_cores():
        return lower(names)


def _die_with(parent: int) -> None:
    """In the child: end when the parent ends, however it ends (Linux; elsewhere a child
    outlives a killed parent by the time its method takes)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it ended before the line above
        os._exit(1)


def _delegates(ep) -> list:
    from executorch.exir.lowered_backend_module import get_lowered_backend_modules

    return get_lowered_backend_modules(ep.graph_module)


def _buffers(ep) -> Iterator[tuple[list, int, bytes]]:
    """(its delegate's buffer list, index, bytes) of every named-data buffer in ``ep``."""
    for lowered in _delegates(ep):
        store = lowered.named_data_store_output
        for i, buf in enumerate(store.buffers if store is not None else []):
            yield store.buffers, i, buf


def _bulky(buf) -> bool:
    return isinstance(buf, bytes) and len(buf) >= BULK


def _save(ep, path: Path) -> None:
    """``ep`` without its delegates' bulk (see the module docstring), and which of its
    placeholders require grad (serde drops the flag; the program records it)."""
    import torch
    from executorch.exir.serde.serialize import save

    digests = []
    for buffers, i, buf in _buffers(ep):
        if _bulky(buf):
            digests.append(hashlib.sha256(buf).hexdigest())
            buffers[i] = digests[-1].encode()
    for lowered in _delegates(ep):
        weights = lowered.original_module.state_dict
        for name, t in weights.items():  # one element each, broadcast to its shape
            small = torch.zeros((), dtype=t.dtype).expand(t.shape)
            weights[name] = torch.nn.Parameter(small, False) if isinstance(t, torch.nn.Parameter) else small
    grad = [n.name for n in ep.graph.nodes
            if n.op == "placeholder" and getattr(n.meta.get("val"), "requires_grad", False)]
    save(ep, path, extra_files={"omnidraft": json.dumps({"digests": digests, "requires_grad": grad})})


def _load(path: Path, donor):
    """The saved program completed from ``donor`` (this process's lowered method); None when
    ``donor`` lacks some of its named data."""
    from executorch.exir.serde.serialize import load

    extra = {"omnidraft": ""}
    quiet = logging.getLogger("executorch.exir.serde.export_serialize")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "symbol u0 did not appear": names of unbacked sizes, harmless
    try:
        ep = load(path, extra_files=extra)
    finally:
        quiet.setLevel(level)
    told = json.loads(extra["omnidraft"])
    wanted = set(told["digests"])
    have = {hashlib.sha256(buf).hexdigest(): buf for _, _, buf in _buffers(donor) if _bulky(buf)}
    if not wanted <= have.keys():
        return None
    for buffers, i, buf in _buffers(ep):
        if len(buf) == 64 and buf.decode("ascii", "replace") in wanted:
            buffers[i] = have[buf.decode()]
    grad = set(told["requires_grad"])
    for node in ep.graph.nodes:
        if node.name in grad:
            node.meta["val"].requires_grad_(True)
    return ep
