"""The standing benchmarks, by name: what each asks, its rows and the row its ratios are to.

- ``pair``: the product against the honest alternatives, greedy, on plain (code, chat, ShareGPT)
  and copy-heavy prompts: the pair through Session, the target alone on the same runtime,
  llama.cpp alone (where installed) and transformers' assisted generation at its best setting;
  the product's output equal to the target alone's counted (lossless, measured).

``Options`` validates itself and names the bad option. Knows the rows; nothing about running them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from omnidraft.bench.prompts import SETS
from omnidraft.errors import OmniDraftError
from omnidraft.pairs.settings import Runtime
from omnidraft.pairs.spec import DEFAULT_DRAFTER

PAIR_ROWS = ("product", "target", "llamacpp", "assisted")


@dataclass(frozen=True)
class Options:
    """``counts``: prompts per set (prompts.py SETS); ``rows``: the suite's rows to run (None: all);
    ``dtype``: the eager models' dtype (the product's own runtimes are `omnidraft pair`'s choice)."""

    drafter: str = DEFAULT_DRAFTER
    target: str = "qwen2.5-coder-0.5b"
    counts: dict = field(default_factory=lambda: {"code": 6, "chat": 6, "copy": 6})
    max_new_tokens: int = 96
    threads: int = 2
    dtype: str = "bf16"
    rows: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise OmniDraftError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.threads < 1:
            raise OmniDraftError(f"threads must be >= 1, got {self.threads}")
        if self.dtype not in ("fp32", "bf16"):
            raise OmniDraftError(f"dtype must be fp32 or bf16, got {self.dtype!r}")
        for name, n in self.counts.items():
            if name not in SETS:
                raise OmniDraftError(f"unknown prompt set {name!r}", f"use {', '.join(SETS)}")
            if not isinstance(n, int) or n < 0:
                raise OmniDraftError(f"{name}: a prompt count must be an integer >= 0, got {n!r}")
        if not any(self.counts.values()):
            raise OmniDraftError("no prompts to run", "ask for at least one prompt of a set")

    def as_json(self) -> dict:
        """What a history compares runs by."""
        return {"drafter": self.drafter, "target": self.target, "counts": dict(sorted(self.counts.items())),
                "max_new_tokens": self.max_new_tokens, "threads": self.threads, "dtype": self.dtype,
                "rows": list(self.rows) if self.rows else None}


@dataclass(frozen=True)
class Suite:
    name: str
    question: str
    build: Callable[["Options", Callable[[str], None]], dict]  # (options, log) -> {row key: Row}, in order
    reference: str  # the key of the row ratios and equality are to (a key of what ``build`` returns)


def _pair_rows(opts: Options, log) -> dict:
    from omnidraft.bench import rows

    wanted = opts.rows or PAIR_ROWS
    for name in wanted:
        if name not in PAIR_ROWS:
            raise OmniDraftError(f"the pair suite has no row {name!r}", f"use {', '.join(PAIR_ROWS)}")
    runtime = Runtime(dtype=opts.dtype, threads=opts.threads)
    built = {}
    if "product" in wanted:
        log("loading the pair through Session ...")
        built["product"] = rows.product(opts.drafter, opts.target, runtime)
    if "target" in wanted:  # the same runtime as the product's (eager without a product row)
        same = built["product"].session.target_runtime if "product" in built else "eager"
        built["target"] = rows.target_alone(opts.target, Runtime(target=same, dtype=opts.dtype, threads=opts.threads))
    if "llamacpp" in wanted:
        row = rows.LlamaCppRow.make(opts.target, opts.threads, log)
        if row is not None:
            built["llamacpp"] = row
    if "assisted" in wanted:
        log("loading transformers' assisted generation ...")
        built["assisted"] = rows.AssistedRow(opts.target, opts.drafter, opts.dtype)
    return {n: built[n] for n in PAIR_ROWS if n in built}


SUITES = {
    "pair": Suite("pair", "Is the pair faster than every honest alternative on this CPU, and is its greedy output the "
                  "target's own?", _pair_rows, "target"),
}


def suite(name: str) -> Suite:
    if name not in SUITES:
        raise OmniDraftError(f"unknown benchmark suite {name!r}", f"use one of {', '.join(SUITES)}")
    return SUITES[name]
