"""Strategy `ar`: the target decodes alone, one token per forward. The reference every other
strategy must reproduce (greedy) and beat (tokens/s).

Knows an LM and a sampler; nothing about drafters or vocabularies.
"""

from __future__ import annotations

import time
from typing import Iterator

from omnidraft.decode.metrics import Metrics
from omnidraft.models.lm import LM
from omnidraft.sampling import SamplingConfig, next_token


def decode_ar(target: LM, prompt_ids: list[int], *, max_new_tokens: int,
              sampling: SamplingConfig, stop: set[int], metrics: Metrics) -> Iterator[list[int]]:
    """Yield each new token (as a one-item list) until a stop id or ``max_new_tokens``. The prefill
    keeps the longest prefix of the prompt that ``target``'s cache already holds (models/lm.py sync:
    a chat template's system prompt left by the previous request, as llama.cpp keeps it)."""
    gen = sampling.generator("ar")
    t0 = time.perf_counter()
    logits = target.sync(prompt_ids).logits[-1]  # [V]
    metrics.target_forwards += 1
    metrics.prefill_s = time.perf_counter() - t0
    for _ in range(max_new_tokens):
        tok = next_token(logits, sampling, gen)
        metrics.new_tokens += 1
        metrics.steps += 1
        metrics.wall_s = time.perf_counter() - t0
        yield [tok]
        if tok in stop or metrics.new_tokens >= max_new_tokens:
            break
        logits = target.extend([tok]).logits[-1]
        metrics.target_forwards += 1
    metrics.wall_s = time.perf_counter() - t0
