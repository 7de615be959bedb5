"""The ``costs`` suite: what one target call of n tokens returning every position's logits costs,
v(n), per target runtime on this CPU (the ExecuTorch programs `omnidraft export --target` wrote,
transformers bf16 and fp32, llama.cpp on the packaged GGUF where the extra is installed); what
one drafted token costs on each of the drafter's runtimes; and how often each target runtime's
argmax agrees with fp32 transformers, teacher-forced on fp32's greedy continuation of code and
chat prompts. Every runtime times the same widths after the same 64 cached tokens, the cache
rolled back after each call (pairs/timing.py ``time_calls``); rounds alternate the runtimes so
the machine's load hits each alike. A row is a runtime; its tokens/s is one token a call
(1000 / v(1)), what the history compares run to run.

Knows runtimes and timing; nothing about decoding with drafts or the pair.
"""

from __future__ import annotations

import statistics
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from omnidraft.errors import OmniDraftError
from omnidraft.measure import report
from omnidraft.measure.report import table
from omnidraft.measure.stamp import stamp
from omnidraft.pairs.spec import DEFAULT_DRAFTER

QUESTION = ("What does one target call of n tokens cost, v(n), per runtime on this CPU, what does a drafted token "
            "cost, and how often does each runtime's argmax agree with fp32?")


@dataclass(frozen=True)
class CostOptions:
    """``widths``: tokens per timed call (1 among them: a row's tokens/s); ``reps``: calls per width
    and round (their median); ``rounds``: passes over the runtimes (the median of the rounds);
    ``quants``: the target programs' schemes timed (those exported); ``eager``: transformers too;
    ``agreement``: prompts for the top-1 agreement with fp32 (0: none)."""

    drafter: str = DEFAULT_DRAFTER
    target: str = "qwen2.5-coder-0.5b"
    widths: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 12, 16)
    reps: int = 7
    rounds: int = 3
    quants: tuple[str, ...] = ("8da8w",)
    eager: bool = True
    agreement: int = 6
    max_new_tokens: int = 32
    threads: int = 2

    def __post_init__(self):
        if not self.widths or any(not isinstance(w, int) or w < 1 for w in self.widths) or 1 not in self.widths:
            raise OmniDraftError(f"widths must be integers >= 1 including 1, got {list(self.widths)}")
        for name in ("reps", "rounds", "threads", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise OmniDraftError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.agreement < 0:
            raise OmniDraftError(f"agreement must be >= 0 prompts, got {self.agreement}")

    def as_json(self) -> dict:
        return {"drafter": self.drafter, "target": self.target, "widths": sorted(self.widths), "reps": self.reps,
                "rounds": self.rounds, "quants": list(self.quants), "eager": self.eager,
                "agreement": self.agreement, "max_new_tokens": self.max_new_tokens, "threads": self.threads}


def target_runtimes(opts: CostOptions, log: Callable[[str], None]) -> dict:
    """Row name -> the target on that runtime: each exported program of ``opts.quants``, transformers
    bf16 and fp32 (with ``opts.eager``), llama.cpp (where installed)."""
    from omnidraft.export.layout import program_dir
    from omnidraft.pairs.build import local_target

    out = {}
    for q in opts.quants:
        if (program_dir(opts.target, q, 1024, role="target") / "program.pte").is_file():
            out[f"executorch {q}"] = local_target(opts.target, "executorch", quant=q)
        else:
            log(f"no {q} target program (omnidraft export --target {opts.target} --quant {q}): no row")
    if opts.eager:
        for dtype in ("bf16", "fp32"):
            out[f"transformers {dtype}"] = local_target(opts.target, "eager", dtype=dtype)
    try:
        lm = local_target(opts.target, "llamacpp")
        out[f"llama.cpp ({lm.gguf.stat().st_size / 2**20:.0f} MiB GGUF)"] = lm
    except OmniDraftError as err:
        log(f"no llama.cpp row: {err}")
    return out


def time_rows(runtimes: dict, widths: list[int], reps: int, rounds: int, log: Callable[[str], None]) -> dict:
    """Row -> width -> median ms over ``rounds`` (each the median of ``reps`` calls), the runtimes
    alternating width by width."""
    from omnidraft.pairs.timing import time_calls

    samples = {r: {w: [] for w in widths} for r in runtimes}
    for rnd in range(rounds):
        for w in widths:
            for r, lm in runtimes.items():
                samples[r][w].append(time_calls(lm, w, reps))
        log(f"round {rnd + 1}/{rounds}: " + ", ".join(f"{r} v(1) {statistics.median(s[1]):.1f} ms"
                                                       for r, s in samples.items()))
    return {r: {w: round(statistics.median(v), 2) for w, v in s.items()} for r, s in samples.items()}


def agreement(opts: CostOptions, runtimes: dict, log: Callable[[str], None]) -> dict:
    """Row -> the share of positions where its argmax is fp32 transformers' greedy token, on fp32's
    own greedy continuation of ``opts.agreement`` code and chat prompts (one call each)."""
    import torch

    from omnidraft.bench.prompts import prompt_sets
    from omnidraft.decode.generate import generate_ar
    from omnidraft.decode.target import LocalTarget
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.build import local_target

    tok = load_tokenizer(opts.target)
    ref = LocalTarget(runtimes.get("transformers fp32") or local_target(opts.target, "eager", dtype="fp32"))
    hits = {r: [0, 0] for r in runtimes if r != "transformers fp32"}
    for p in prompt_sets({"code": opts.agreement - opts.agreement // 2, "chat": opts.agreement // 2}):
        ids = encode_prompt(tok, p.text, chat=p.chat)
        cont = generate_ar(ref, tok, p.text, max_new_tokens=opts.max_new_tokens, chat=p.chat).token_ids
        for r, counts in hits.items():
            lm = runtimes[r]
            lm.reset()
            rows = lm.extend(ids + cont).logits[len(ids) - 1: len(ids) + len(cont) - 1]  # [len(cont), V]
            counts[0] += int((rows.argmax(-1) == torch.tensor(cont)).sum())
            counts[1] += len(cont)
    out = {r: round(h / max(n, 1), 4) for r, (h, n) in hits.items()}
    log(f"top-1 agreement with fp32: {out}")
    return out


def drafter_ms(opts: CostOptions, log: Callable[[str], None]) -> dict:
    """The drafter's ms per drafted token (a one-token call after 64 cached) on each runtime it has."""
    from omnidraft.pairs.build import load_drafter
    from omnidraft.pairs.timing import time_calls

    out = {}
    for runtime, label in (("executorch", "executorch 8da8w"), ("eager", "transformers fp32")):
        try:
            lm = load_drafter(opts.drafter, runtime)
        except OmniDraftError as err:
            log(f"no drafter row on {runtime}: {err}")
            continue
        out[f"{opts.drafter} {label}"] = round(statistics.median(time_calls(lm, 1, opts.reps)
                                                                  for _ in range(opts.rounds)), 2)
    return out


def run_costs(opts: CostOptions, *, out: str | Path = "bench/results", keep: bool = True,
              log: Callable[[str], None] = lambda s: None) -> dict:
    """Run the suite; returns the result (also written under ``out``, with a v(n)/v(1) plot)."""
    from omnidraft.device.threads import set_threads

    set_threads(opts.threads)
    stamped = stamp("costs", opts.threads, question=QUESTION, options=opts.as_json())
    widths = sorted(opts.widths)
    runtimes = target_runtimes(opts, log)
    if not runtimes:
        raise OmniDraftError("no target runtime to time", "export the target program or drop --no-eager")
    ms = time_rows(runtimes, widths, opts.reps, opts.rounds, log)
    agree = agreement(opts, runtimes, log) if opts.agreement else {}
    rows = {r: {"v": v, "tokens_per_s": round(1e3 / v[1], 2), "v4_over_v1": round(v[4] / v[1], 2) if 4 in v else None,
                "top1_vs_fp32": agree.get(r)} for r, v in ms.items()}
    result = {**stamped, "widths": widths, "rows": rows, "drafter_ms_per_token": drafter_ms(opts, log)}
    stem = report.write(out, "bench-costs", "omnidraft bench costs", result, _markdown(result), keep=keep)
    _plot(result, stem.with_suffix(".png"), log)
    return result


def _markdown(result: dict) -> list[str]:
    o, widths = result["options"], result["widths"]
    lines = [result["question"], "", f"{o['target']}: median ms of one call of n tokens returning every position's "
             f"logits after 64 cached tokens ({o['rounds']} rounds x {o['reps']} calls, runtimes alternating); "
             f"tokens/s alone = 1000 / v(1); top-1 agreement with fp32 transformers on {o['agreement']} prompts.", ""]
    lines += table(["runtime", *[f"v({w})" for w in widths], "v(4)/v(1)", "tokens/s alone", "top-1 vs fp32"],
                          [[r, *[s["v"][w] for w in widths], s["v4_over_v1"] or "-", s["tokens_per_s"],
                            "-" if s["top1_vs_fp32"] is None else s["top1_vs_fp32"]]
                           for r, s in result["rows"].items()])
    return lines + ["", "Drafter, ms per drafted token:", ""] + table(
        ["drafter", "ms"], list(result["drafter_ms_per_token"].items()))


def _plot(result: dict, path: Path, log: Callable[[str], None]) -> None:
    try:
        import matplotlib
    except ImportError:
        log("matplotlib not installed (pip install -e '.[bench]'): no v(n) plot")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r, s in result["rows"].items():
        ws = sorted(s["v"])
        ax.plot(ws, [s["v"][w] / s["v"][1] for w in ws], marker="o", label=r)
    ax.set_title(f"{result['options']['target']}: v(n) / v(1)")
    ax.set_xlabel("tokens per call (n)")
    ax.set_ylabel("cost relative to one token")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(textwrap.fill(result["cpu"]["line"], 120), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
