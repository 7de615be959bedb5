"""The history of a machine's results (one JSON line per run, bench/results/history.jsonl) and
the change of a run against the last one of the same suite on the same CPU with the same
options, as llama.cpp's compare-llama-bench compares two builds: each row's tokens/s then and
now, and the commits between.

Knows the result's layout (``suite``, ``cpu``, ``options``, ``commit``, ``rows``: name ->
{"tokens_per_s", ...}; a result whose rows are not rates names its figure in ``headline``, e.g.
export seconds); nothing about how rows ran.
"""

from __future__ import annotations

import json
from pathlib import Path


def entry(result: dict) -> dict:
    """What the history keeps of a result: its stamp, options and each row's summary figures."""
    keep = ("suite", "date", "commit", "dirty", "options", "headline")
    rows = {name: {k: v for k, v in row.items() if k != "per_prompt"} for name, row in result["rows"].items()}
    return {**{k: result.get(k) for k in keep}, "cpu": result["cpu"]["model"], "threads": result.get("threads"),
            "rows": rows}


def last(path: Path, like: dict) -> dict | None:
    """The latest entry of ``path`` comparable with ``like`` (an entry): the same suite, CPU,
    threads and options; None if there is none (or no history)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            old = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash: the others stand
        if all(old.get(k) == like.get(k) for k in ("suite", "cpu", "threads", "options")):
            return old
    return None


def append(path: Path, result: dict) -> dict | None:
    """Add ``result`` to the history at ``path``; returns the entry it is compared with (None: the first)."""
    new = entry(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    before = last(path, new)
    with open(path, "a") as f:
        f.write(json.dumps(new) + "\n")
    return before


def changes(before: dict | None, result: dict) -> list[str]:
    """Lines saying each row's headline figure (tokens/s unless the result names another) now
    against ``before`` (the last comparable entry)."""
    if before is None:
        return ["First run of this suite here with these options: nothing to compare with."]
    was = f"{(before.get('commit') or '?')[:9]}{' (dirty)' if before.get('dirty') else ''}"
    now = f"{(result.get('commit') or '?')[:9]}{' (dirty)' if result.get('dirty') else ''}"
    lines = [f"Against the last run ({before.get('date', '?')[:16]}, {was}) now at {now}:"]
    key = result.get("headline", "tokens_per_s")
    unit = "tokens/s" if key == "tokens_per_s" else key.replace("_", " ")
    for name, row in result["rows"].items():
        old = before["rows"].get(name, {}).get(key)
        new = row.get(key)
        if old and new:
            lines.append(f"- {name}: {new:.2f} {unit}, was {old:.2f} ({(new / old - 1) * 100:+.1f}%)")
        else:
            lines.append(f"- {name}: {new if new is not None else '-'} {unit}, new row")
    return lines
