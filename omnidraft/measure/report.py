"""A result on disk: ``<out>/<name>-<stamp>.json`` (the whole result, per-prompt figures included)
and ``.md`` (headed by the title, the CPU line, the commit, then the caller's lines), added to the
history beside them (measure/history.py) with its change against the last comparable run.

Knows files and markdown; nothing about what was measured.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from omnidraft.measure import history

HISTORY = "history.jsonl"


def table(header: list[str], rows) -> list[str]:
    """A markdown table: the header, its rule, then one line per row of cells."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
        ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def write(out: str | Path, name: str, title: str, result: dict, md: list[str], *, keep: bool = True) -> Path:
    """Write the result and its markdown under ``out``; with ``keep``, add it to ``out``'s history
    and say its change against the last comparable run (also in the markdown). Returns the
    files' stem; the markdown goes to stdout too."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dirty = " with uncommitted changes" if result.get("dirty") else ""
    commit = f"{(result.get('commit') or 'no git checkout')[:12]}{dirty}"
    head = [f"# {title} ({result['date'][:16]}Z)", "", f"CPU: {result['cpu']['line']}. Commit {commit}.", ""]
    change = history.changes(history.append(out / HISTORY, result), result) if keep else []
    lines = head + md + ([""] + change if change else [])
    base = stem = out / f"{name}-{dt.datetime.now().strftime('%Y%m%d-%H%M')}"
    n = 1
    while stem.with_suffix(".json").exists():  # a run in the same minute keeps the earlier one
        n += 1
        stem = base.with_name(f"{base.name}-{n}")
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return stem
