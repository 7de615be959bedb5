"""The settings of a pair's memory of earlier answers: its byte bound and how a recall is found
and cut. Validates itself and names the bad field.

Knows numbers only.
"""

from __future__ import annotations

from dataclasses import dataclass

from omnidraft.errors import OmniDraftError

# What one remembered token costs, on disk and in RAM together: its id in the store (4 bytes) and in
# the index's token array (4), and one entry in each of the index's two n-gram tables (8-byte hash and
# 4-byte position each). An answer also costs ENTRY_BYTES (its row, its sentinel, its bookkeeping).
BYTES_PER_TOKEN = 32
ENTRY_BYTES = 128
DEFAULT_MIB = 64  # a phone's share: ~2M tokens, some 10,000 answers with their prompts


@dataclass(frozen=True)
class MemoryConfig:
    max_bytes: int = DEFAULT_MIB << 20  # the whole memory (every space of the pair): store and index
    short: int = 3  # the shortest suffix that counts as a match (the short n-gram table)
    long: int = 8  # the long n-gram table: a match this long is found among all occurrences
    max_match: int = 32  # the longest suffix a match is measured to
    max_span: int = 32  # most ids one recall proposes
    candidates: int = 256  # most recent occurrences of a suffix a recall weighs
    min_prob: float = 0.1  # a recall stops where its estimated chance falls below this (SuffixDecoding's)
    max_prompt: int = 4096  # most prompt ids (its last) kept with an answer
    low_water: float = 0.9  # eviction frees down to this share of max_bytes (evictions come in batches)

    def __post_init__(self):
        def check(ok: bool, name: str, want: str) -> None:
            if not ok:
                raise OmniDraftError(f"MemoryConfig.{name} must be {want}, got {getattr(self, name)!r}")

        check(self.max_bytes >= 1 << 20, "max_bytes", ">= 1 MiB")
        check(1 <= self.short < self.long <= self.max_match <= 64, "short", "1 <= short < long <= max_match <= 64")
        check(self.max_span >= 1, "max_span", ">= 1")
        check(self.candidates >= 1, "candidates", ">= 1")
        check(0.0 < self.min_prob <= 1.0, "min_prob", "in (0, 1]")
        check(self.max_prompt >= 0, "max_prompt", ">= 0")
        check(0.0 < self.low_water <= 1.0, "low_water", "in (0, 1]")


def entry_bytes(tokens: int) -> int:
    """What remembering an entry of ``tokens`` ids costs against the bound."""
    return tokens * BYTES_PER_TOKEN + ENTRY_BYTES
