"""Preprocess the XNNPACK partitions of a program on both cores.

ExecuTorch hands every partition of every method to one backend call (``preprocess_multimethod``)
that preprocesses them one after another: graph passes and a flatbuffer per partition, each
independent of the others (constants are keyed by their content). Within
``preprocess_on_two_cores()`` a forked child preprocesses every other partition and sends its
results back through a pipe while this process preprocesses the rest; a child that fails leaves
its partitions to this process. The program does not change (the test compares bytes).

Knows ExecuTorch's backend API and os.fork; nothing about models.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from typing import Iterator


@contextlib.contextmanager
def preprocess_on_two_cores() -> Iterator[None]:
    """Within the block, XNNPACK preprocesses partitions in this process and one forked child."""
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend

    if (os.cpu_count() or 1) < 2 or not hasattr(os, "fork"):
        yield
        return
    XnnpackBackend.preprocess_multimethod = classmethod(_split)
    try:
        yield
    finally:
        del XnnpackBackend.preprocess_multimethod  # the inherited one-by-one loop again


def _split(cls, edge_programs: dict, compile_specs: dict) -> dict:
    jobs = [(method, i) for method, programs in edge_programs.items() for i in range(len(programs))]

    def run(job):
        method, i = job
        return cls.preprocess(edge_programs[method][i], compile_specs[method][i])

    theirs = jobs[1::2]
    child_results = _in_child(run, theirs) if theirs else dict
    try:
        done = {job: run(job) for job in jobs[0::2]}
    finally:  # the child ends after its jobs: always collected, even when ours failed
        from_child = child_results()
    done.update(from_child)
    done.update({job: run(job) for job in theirs if job not in done})  # what the child could not do
    return {method: [done[(method, i)] for i in range(len(programs))]
            for method, programs in edge_programs.items()}


def _in_child(run, jobs: list):
    """Start ``run`` over ``jobs`` in a forked child; returns a call that waits for the child and
    gives its results ({} if it failed)."""
    import torch

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's stack
        status = 1
        try:
            os.close(read)
            torch.set_num_threads(1)  # the parent keeps its threads; no OpenMP team is forked
            with os.fdopen(write, "wb") as out:
                pickle.dump({job: run(job) for job in jobs}, out, protocol=pickle.HIGHEST_PROTOCOL)
            status = 0
        finally:
            os._exit(status)
    os.close(write)

    def results() -> dict:
        try:
            with os.fdopen(read, "rb") as got:
                return pickle.load(got)
        except Exception:  # noqa: BLE001 - a child that failed part-way: its jobs run here
            return {}
        finally:
            os.waitpid(pid, 0)

    return results
