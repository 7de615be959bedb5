"""Strategy `ar`: the target decodes alone, one token per forward. The reference every other
strategy must reproduce (greedy) and beat (tokens/s).

It runs on the same ``Target`` the speculative loop verifies with (an empty proposal is one
plain decoding step), so a local and a remote target decode alone the same way. Knows the
Target protocol; nothing about drafters or vocabularies.
"""

from __future__ import annotations

import time
from typing import Iterator

from omnidraft.decode.metrics import Metrics
from omnidraft.decode.target import Target


def decode_ar(target: Target, prompt_ids: list[int], *, max_new_tokens: int, stop: set[int],
              metrics: Metrics) -> Iterator[list[int]]:
    """Yield each new token (as a one-item list) until a stop id or ``max_new_tokens``, sampled
    with the target's own settings. The prefill keeps the longest prefix of the prompt that the
    target's cache already holds (models/lm.py sync: a chat template's system prompt left by the
    previous request, as llama.cpp keeps it); it yields the first token's logits, and each later
    token costs one forward over the one before."""
    t0 = time.perf_counter()
    target.start(prompt_ids)
    metrics.prefill_s = time.perf_counter() - t0
    while metrics.new_tokens < max_new_tokens:
        tok = target.verify([], None).token
        metrics.new_tokens += 1
        metrics.steps += 1
        metrics.target_forwards += 1
        metrics.wall_s = time.perf_counter() - t0
        yield [tok]
        if tok in stop:
            break
    metrics.wall_s = time.perf_counter() - t0
