"""Shared by the benchmark scripts: a report's stamp and its files, both the package's
(omnidraft/measure/): a script's report carries what a suite's result does (the command, the date,
the commit measured and whether the tree had changes, the CPU line, the library versions) and is
written as one (JSON + markdown under --out, headed by the CPU line and the commit), outside the
suites' history.

Does not know a benchmark's options, models or rows (benchsetup.py and the scripts).
"""

from __future__ import annotations

import sys
from pathlib import Path

from omnidraft.measure.report import table, write
from omnidraft.measure.stamp import cpu_line, stamp

__all__ = ["cpu_line", "save", "stamp_report", "table"]


def stamp_report(**fields) -> dict:
    """measure/stamp.py's fields for this script, then ``fields`` (a ``cpu`` among them gives way
    to the stamp's, which is the same description with its line)."""
    import torch

    fields.pop("cpu", None)
    return {**stamp(Path(sys.argv[0]).stem, torch.get_num_threads()), **fields}


def save(out: str | Path, name: str, title: str, report: dict, md: list[str]) -> Path:
    """Write <out>/<name>-<stamp>.json and .md, print the markdown; returns the path stem."""
    return write(out, name, title, report, md, keep=False)
