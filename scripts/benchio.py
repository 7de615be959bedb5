"""Shared by the benchmark scripts: what a report holds and where it is written.

Knows the fields every report carries, the sums of generation metrics a report row is made
from, the markdown tables, the JSON + markdown files under --out, and the on-disk training
records shared by the training benchmarks. Does not know a benchmark's options, models or rows
(benchsetup.py and the scripts).
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omnidraft.measure.report import table  # noqa: F401  (the scripts' tables)
from omnidraft.measure.stamp import cpu_line, git_state  # noqa: F401  (cpu_line: the CPU line every table states)
from omnidraft.measure.tally import ratio_interval  # noqa: F401  (paired intervals)


def stamp_report(**fields) -> dict:
    """The fields every report carries: the command, the date, the commit measured (and whether
    the tree had changes), the library versions."""
    import tokenizers
    import torch
    import transformers

    return {"command": " ".join([sys.executable] + sys.argv),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(), **git_state(),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                         "machine": platform.machine(), "threads": torch.get_num_threads()},
            **fields}


@dataclass
class Tally:
    """Sums of generation metrics over the prompts of one row; ``equal``: outputs equal to a reference."""

    tokens: int = 0
    wall: float = 0.0
    proposed: int = 0
    accepted: int = 0
    steps: int = 0
    ngram: int = 0
    equal: int = 0
    per_prompt: list[tuple[int, float]] = field(default_factory=list)  # (new tokens, wall s), in added order

    def add(self, metrics: dict, equal: bool = False) -> None:
        self.tokens += metrics["new_tokens"]
        self.wall += metrics["wall_s"]
        self.per_prompt.append((metrics["new_tokens"], metrics["wall_s"]))
        self.proposed += metrics["proposed"]
        self.accepted += metrics["accepted"]
        self.steps += metrics["steps"]
        self.ngram += metrics["ngram_proposed"]
        self.equal += int(equal)

    def acceptance_rate(self) -> float:
        return round(self.accepted / max(self.proposed, 1), 4)

    def tokens_per_s(self) -> float:
        return round(self.tokens / self.wall, 3)


def filled(m: dict) -> dict:
    """A generation's metrics with the counts a target-alone (or draft-free) run leaves unset filled
    in: nothing proposed or accepted, one step and one target forward per new token."""
    return {**m, "proposed": m.get("proposed") or 0, "accepted": m.get("accepted") or 0,
            "steps": m.get("steps") or m["new_tokens"], "ngram_proposed": m.get("ngram_proposed") or 0,
            "target_forwards": m.get("target_forwards") or m["new_tokens"]}


def save(out: str | Path, name: str, title: str, report: dict, md: list[str]) -> Path:
    """Write <out>/<name>-<stamp>.json and .md (headed "# <title> (<report date>Z)"), print the
    markdown; returns the path stem."""
    md = [f"# {title} ({report['date'][:16]}Z)", "", *md]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{name}-{dt.datetime.now().strftime('%Y%m%d-%H%M')}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return stem


def records_dir(drafter_name: str, target_name: str, target_dtype: str, k: int, max_new_tokens: int,
                stream: str = "humaneval") -> Path:
    """Where the training records of one (models, settings, prompt stream) combination are kept."""
    from omnidraft.home import subdir

    tag = "" if stream == "humaneval" else f"-{stream}"
    return subdir("bench-records", f"online-{drafter_name}-{target_name}-{target_dtype}-k{k}-n{max_new_tokens}{tag}")


def training_records(drafter, target, pair, prompts: list[str], *, drafter_name: str, target_name: str,
                     target_dtype: str, k: int, max_new_tokens: int, log=None, stream: str = "humaneval",
                     chat: bool = False) -> list:
    """Training records of greedy omnidraft generations over ``prompts``, each starting from the
    pair's current (seeded) n-gram cache. Kept on disk as they are made under
    $OMNIDRAFT_HOME/bench-records (resumable, and shared by every benchmark with the same models
    and settings): greedy verification makes them independent of the drafter's training.
    ``chat``: the prompts go through the target's chat template (``stream`` names the set)."""
    import copy

    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.train.records import Record, build_record
    from omnidraft.propose.config import SpecConfig

    rdir = records_dir(drafter_name, target_name, target_dtype, k, max_new_tokens, stream)
    seeded = copy.deepcopy(pair.cache)
    verifier = LocalTarget(target)  # greedy
    records = []
    for i, p in enumerate(prompts):
        path = rdir / f"{i:04d}.record"
        if path.is_file():
            records.append(Record.from_bytes(path.read_bytes()))
            continue
        pair.cache = copy.deepcopy(seeded)
        gen = generate_speculative(drafter, verifier, pair, p, cfg=SpecConfig("omnidraft"), k=FixedK(k),
                                   max_new_tokens=max_new_tokens, record_topk=64, chat=chat)
        r = build_record(pair.vmap, gen.verified)
        records.append(r)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(r.to_bytes())
        tmp.replace(path)
        if log and i % 20 == 19:
            log(f"recorded {i + 1}/{len(prompts)} training generations")
    pair.cache = seeded
    return records
