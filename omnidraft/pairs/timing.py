"""Timing a pair's models through the calls decoding makes (the runtimes' own ``extend`` /
``rollback``): the target's verify call by width v(n), its prompt read, the drafter's ms per token
and its catch-up read; and what such timings are valid for (both runtimes, this CPU, the thread
count). pairs/cost.py prices rounds from them.

Knows the LM protocol; nothing about tokenizers, strategies or where timings are kept.
"""

from __future__ import annotations

import statistics
import time

from omnidraft.device.cpu import cpu_info
from omnidraft.errors import OmniDraftError
from omnidraft.pairs.cost import CostModel

CONTEXT = 64  # tokens in the cache before a timed call (a short prompt's worth)
# what a session times: v(1..9) for k <= 8, and the wider calls a long copy from the context is
# verified in. Verification costs rise in steps, not lines (XNNPACK's int8 GEMMs on AVX2 take 4 rows
# at a time: v(5) ~ v(8) ~ 1.8 v(4) on the 1.5B here), so a copy proposes only lengths whose call
# width was measured (CostModel.copy_lengths); widths between are interpolated for the drafter only.
WIDTHS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32)
CATCHUP = 32  # tokens in the drafter's timed catch-up call (a stretch of copied text's worth)
REPS = 3  # timed calls per width when a session measures (the median; online acceptance does the rest)
READ_REPS = 2  # timed prompt reads (last row only) at the widest width; prompt reads refine the price online


def time_calls(lm, width: int, reps: int = 7, context: int = CONTEXT, warmup: bool = True,
               last_only: bool | None = None) -> float:
    """Median ms of ``reps`` calls of ``lm.extend`` of ``width`` tokens after ``context`` cached
    tokens, rolled back after each call (the cache holds the same state for every call), after
    one untimed call with ``warmup`` (an LM's first calls; once it is warm, the median leaves out
    a first call at a new width). The context is synced, not read anew: timing several widths
    reads it once (on llama.cpp a 64-token read costs ~1.5 s per width on an AVX2-only EPYC).
    ``last_only``: logits for the last row only (a prompt read); None: every row where ``lm``
    verifies (a target), the last row only for a drafter program."""
    if context + width > lm.max_length:
        raise OmniDraftError(f"{lm.name}: {context + width} tokens exceed its context of {lm.max_length}")
    vocab = lm.vocab_size
    base = [(100 + i * 37) % vocab for i in range(context)]
    lm.sync(base)
    ids = [(500 + i) % vocab for i in range(width)]
    last_only = not _all_rows(lm) if last_only is None else last_only  # a drafter program: the last row only
    times = []
    for _ in range(reps + warmup):
        t0 = time.perf_counter()
        lm.extend(ids, last_only=last_only)
        times.append((time.perf_counter() - t0) * 1e3)
        lm.rollback(width)
    return statistics.median(times[int(warmup):])


def _all_rows(lm) -> bool:
    """Whether ``lm`` returns every position's logits (what a verifying target must)."""
    info = getattr(lm, "info", None)
    return info is None or info.role == "target"


def runtime_name(lm, eager_dtype: str) -> str:
    """``executorch <quant>`` for a program, ``llama.cpp <model and weight type>`` for a GGUF on
    llama.cpp, ``transformers <dtype>`` for an eager model."""
    info = getattr(lm, "info", None)
    if info is not None:
        return f"executorch {info.config['quant']}"
    return getattr(lm, "runtime", None) or f"transformers {eager_dtype}"


def measured_on(target_runtime: str, drafter_runtime: str) -> dict:
    """What a cost model is only valid for: both runtimes, this CPU and the thread count."""
    import torch

    return {"target_runtime": target_runtime, "drafter_runtime": drafter_runtime,
            "cpu": cpu_info()["model"], "threads": torch.get_num_threads()}


def measure(target, drafter=None, widths: tuple[int, ...] = WIDTHS, reps: int = 7,
            progress=None) -> CostModel:
    """Time ``target`` (an LM) at each width and reading a prompt at the widest (the last row's
    logits only), and ``drafter`` (an LM) per token, one at a time and reading CATCHUP tokens in
    one call."""
    verify = {}
    for i, w in enumerate(widths):
        verify[w] = round(time_calls(target, w, reps, warmup=i == 0), 3)
        if progress:
            progress(f"verify width {w}: {verify[w]:.1f} ms")
    widest = max(widths)
    read_ms = round(time_calls(target, widest, min(reps, READ_REPS), warmup=False, last_only=True) / widest, 3)
    if progress:
        progress(f"prompt read: {read_ms:.2f} ms per id, {widest} at a time")
    if drafter is None:
        return CostModel(verify_ms=verify, drafter_ms=0.0, read_ms=read_ms)
    drafter_ms = round(time_calls(drafter, 1, reps), 3)
    catchup_ms = round(time_calls(drafter, CATCHUP, reps, warmup=False) / CATCHUP, 3)
    if progress:
        progress(f"drafter: {drafter_ms:.1f} ms per token, {catchup_ms:.2f} ms per token read {CATCHUP} at a time")
    return CostModel(verify_ms=verify, drafter_ms=drafter_ms, catchup_ms=catchup_ms, read_ms=read_ms)
