"""Keep torch's MKL from starting thread teams inside ExecuTorch's thread pool.

The Python ExecuTorch runtime links libtorch_cpu: the LLM custom ops (``llama::custom_sdpa``)
multiply through torch's CPU BLAS (MKL) from inside ExecuTorch's own worker threads, and MKL
then starts an OpenMP team of its own per call on every thread. On 2 cores a 2-token attention
over 30 layers measured 9.0 ms that way against 0.9 ms with MKL single-threaded (one token:
0.5 ms either way), which made every multi-token call of a program (verification, prefill)
cost 2-3x a one-token call (#23).

Two settings fix it: ``MKL_NUM_THREADS=1`` in the environment before torch loads MKL (the
default of every thread, ExecuTorch's workers included; ``configure_process`` sets it, and
gives torch's own thread count back its per-core default), and MKL's count of the calling
thread set to 1 for the duration of a program call (``program_call``). Without the first (torch
imported before omnidraft) the second still removes most of the cost.

ExecuTorch's own thread pool is sized here too (``set_program_threads``, ``ensure_pool``), with
the lines its C++ side prints on creating it (CPU probing, "Resetting threadpool") kept from
the user's terminal.

Knows MKL's, torch's and ExecuTorch's thread settings; nothing about programs or models.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from contextlib import contextmanager
from functools import lru_cache

ENV = "MKL_NUM_THREADS"
POOL_NOISE = ("[cpuinfo_utils.cpp:", "[threadpool.cpp:")  # informational lines of the pool's creation
_pool = {"threads": None}


def configure_process() -> None:
    """Call before torch is imported (the CLI and scripts do): MKL single-threaded by default.
    A user's own ``MKL_NUM_THREADS`` is kept. Torch's intra-op thread count stays what it would
    have been (torch derives it from MKL's default otherwise)."""
    if "torch" in sys.modules or ENV in os.environ:
        return
    os.environ[ENV] = "1"
    import torch

    torch.set_num_threads(physical_cores())


def physical_cores() -> int:
    """Cores this process may run on, counting hyper-threads once (torch's own default)."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        cores, siblings = set(), 0
        phys = None
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "physical id":
                    phys = value.strip()
                elif key == "core id":
                    cores.add((phys, value.strip()))
                elif key == "processor":
                    siblings += 1
        per_core = siblings // len(cores) if cores else 1
    except OSError:
        per_core = 1
    return max(1, allowed // max(1, per_core))


@lru_cache(maxsize=1)
def _set_local():
    """MKL's ``MKL_Set_Num_Threads_Local`` (int by value; returns the previous setting), or None
    when this torch build has no MKL."""
    import torch

    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        fn = lib.MKL_Set_Num_Threads_Local
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn


@contextmanager
def program_call():
    """MKL single-threaded on this thread while a program runs; the previous setting after."""
    fn = _set_local()
    if fn is None:
        yield
        return
    prev = fn(1)
    try:
        yield
    finally:
        fn(prev)


def set_threads(threads: int | None) -> None:
    """The user's ``--threads``: torch's and ExecuTorch's thread counts (None: leave both)."""
    if threads is None:
        return
    if threads < 1:
        from omnidraft.errors import OmniDraftError

        raise OmniDraftError(f"--threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)
    set_program_threads(threads)


def set_program_threads(threads: int) -> None:
    """ExecuTorch's thread pool (XNNPACK's and the custom ops' workers) to ``threads`` threads,
    when the ExecuTorch runtime is installed (otherwise nothing to set)."""
    try:
        from .et_runtime import portable_lib

        lib = portable_lib()
    except ImportError:
        return
    with native_stderr_without(POOL_NOISE):
        lib._unsafe_reset_threadpool(threads)
    _pool["threads"] = threads


def ensure_pool() -> None:
    """Create ExecuTorch's thread pool once, with torch's thread count (quietly)."""
    if _pool["threads"] is None:
        import torch

        set_program_threads(torch.get_num_threads())


@contextmanager
def native_stderr_without(prefixes: tuple[str, ...]):
    """Collect what C/C++ code writes to file descriptor 2 during the block, then write back
    every line that does not start with one of ``prefixes``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            keep = [line for line in tmp.read().decode(errors="replace").splitlines(keepends=True)
                    if not line.startswith(prefixes)]
            if keep:
                sys.stderr.write("".join(keep))
                sys.stderr.flush()
