"""The ``export`` suite: how long `omnidraft export` takes per model (8da8w, 1024 positions), with
and without the lowering's shortcuts: only the XNNPACK passes that can change a partition
(export/xnnpack_passes.py), torchao's quantisation ops propagated as a lookup
(export/quant_fakes.py), provenance records shared between passes (export/provenance.py),
XNNPACK's partitions preprocessed on two cores (export/two_cores.py) and a target's two methods
lowered side by side (export/two_methods.py). Settings: ``none`` (ExecuTorch's and torch's own
paths), ``passes`` (the first shortcut alone), ``one-process`` (all but the last), ``shipped``
(all five). Each export runs alone in a child process, the settings alternating round by round;
each program's sha256 is recorded (no shortcut may change a byte). A row is a model; the history
compares its shipped export seconds.

Knows the export's shortcuts by name; nothing about what they do.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from omnidraft.errors import OmniDraftError
from omnidraft.measure import report
from omnidraft.measure.report import table
from omnidraft.measure.stamp import stamp

QUESTION = "How long does `omnidraft export` take per model, with and without the lowering's shortcuts?"
LATER = ["shape_only_quant_ops", "shared_provenance", "preprocess_on_two_cores", "lower_methods"]
SETTINGS = {"none": ["applicable_passes", *LATER], "passes": LATER, "one-process": ["lower_methods"],
            "shipped": []}  # setting -> the shortcuts it turns off
# the child: `omnidraft export` with the shortcuts named in its first argument turned off (the
# methods then lowered one after the other in this process)
CHILD = """
import contextlib, sys
import omnidraft.export.lower as lower, omnidraft.export.two_methods as two_methods
def one_process(names, lower_some):
    with two_methods.preprocess_on_two_cores():
        return lower_some(names)
for name in filter(None, sys.argv.pop(1).split(",")):
    if name == "lower_methods":
        lower.lower_methods = one_process
    elif name == "preprocess_on_two_cores":
        two_methods.preprocess_on_two_cores = contextlib.nullcontext
    else:
        setattr(lower, name, contextlib.nullcontext)
from omnidraft.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass(frozen=True)
class ExportOptions:
    """``models``: the first exported as a drafter, the rest as targets; ``settings``: SETTINGS'
    names (the last is the one the history compares); ``rounds``: exports of each (the best kept)."""

    models: tuple[str, ...] = ("smollm2-135m", "qwen2.5-coder-0.5b")
    settings: tuple[str, ...] = ("one-process", "shipped")
    rounds: int = 1

    def __post_init__(self):
        if not self.models:
            raise OmniDraftError("export: name at least one model")
        unknown = [s for s in self.settings if s not in SETTINGS]
        if unknown or not self.settings:
            raise OmniDraftError(f"unknown export setting {(unknown or [''])[0]!r}", f"use {', '.join(SETTINGS)}")
        if self.rounds < 1:
            raise OmniDraftError(f"rounds must be >= 1, got {self.rounds}")

    def as_json(self) -> dict:
        return {"models": list(self.models), "settings": list(self.settings), "rounds": self.rounds}


def export_once(model: str, role: str, setting: str, out: Path) -> dict:
    """One export in a child process: its own reported seconds, the wall time, the program's sha256."""
    argv = [sys.executable, "-c", CHILD, ",".join(SETTINGS[setting]), "export", f"--{role}", model,
            "--quant", "8da8w", "--max-seq", "1024", "--out", str(out)]
    t0 = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(nothing)"])[-1]
        raise OmniDraftError(f"exporting {model} ({setting}) failed: {last}")
    wall = time.perf_counter() - t0
    info = json.loads((out / "program.json").read_text())
    return {"model": model, "role": role, "setting": setting, "export_s": info["export_seconds"],
            "wall_s": round(wall, 1), "sha256": hashlib.sha256((out / "program.pte").read_bytes()).hexdigest()}


def run_export(opts: ExportOptions, *, out: str | Path = "bench/results", keep: bool = True,
               log: Callable[[str], None] = lambda s: None) -> dict:
    """Run the suite; returns the result (also written under ``out``)."""
    import torch

    stamped = stamp("export", torch.get_num_threads(), question=QUESTION, options=opts.as_json())
    runs = []
    with tempfile.TemporaryDirectory(prefix="omnidraft-bench-export-") as tmp:
        for r in range(opts.rounds):
            for i, model in enumerate(opts.models):
                role = "drafter" if i == 0 else "target"
                for setting in opts.settings if r % 2 == 0 else opts.settings[::-1]:
                    run = export_once(model, role, setting, Path(tmp) / f"{model}-{r}-{setting}")
                    log(f"{model} ({role}, {setting}): {run['export_s']:.1f} s")
                    runs.append(run)
    rows = {}
    for model in opts.models:
        mine = [x for x in runs if x["model"] == model]
        best = {s: min(x["export_s"] for x in mine if x["setting"] == s) for s in opts.settings}
        rows[model] = {"role": mine[0]["role"], "export_s": best, "seconds": best[opts.settings[-1]],
                       "same_program": len({x["sha256"] for x in mine}) == 1}
    result = {**stamped, "headline": "seconds", "rows": rows, "runs": runs}
    report.write(out, "bench-export", "omnidraft bench export", result, _markdown(result, opts), keep=keep)
    return result


def _markdown(result: dict, opts: ExportOptions) -> list[str]:
    first, last = opts.settings[0], opts.settings[-1]
    cells = [[m, r["role"], *[r["export_s"][s] for s in opts.settings],
              f"{r['export_s'][last] / r['export_s'][first]:.2f}x", "yes" if r["same_program"] else "NO"]
             for m, r in result["rows"].items()]
    return [result["question"], "",
            "Seconds of `omnidraft export` (torch.export + lowering + writing; program.json's export_seconds; the "
            f"best of {opts.rounds} round(s)), 8da8w, max_seq 1024, each export alone in its own process. Settings "
            "(the lowering's shortcuts on): none; passes = only the XNNPACK passes that can change a partition; "
            "one-process = that, torchao's quantisation ops propagated as a lookup, provenance records shared "
            "between passes and the partitions preprocessed on two cores; shipped = that, and a target's two "
            "methods lowered side by side (the second in a forked child).", "",
            *table(["model", "role", *[f"{s} (s)" for s in opts.settings], f"{last} / {first}", "same program bytes"],
                   cells)]
