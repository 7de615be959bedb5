"""Export time per model (#18): `omnidraft export` of the shipped drafter and target programs with
and without the lowering's shortcuts: only the XNNPACK passes that can change a partition
(export/xnnpack_passes.py), fake propagation through torchao's quantisation ops as a lookup
(export/quant_fakes.py), provenance records shared between passes (export/provenance.py),
XNNPACK's partitions preprocessed on two cores (export/two_cores.py) and a target's two methods
lowered side by side (export/two_methods.py). Settings: "none" (ExecuTorch's and torch's own
paths), "passes" (the first shortcut alone), "one-process" (all but the last), "shipped" (all
five). Each export runs alone in a child process; the settings alternate per model, and each
program's sha256 is recorded (no shortcut may change a byte).

  python scripts/bench_export.py --models smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --settings one-process,shipped
Writes bench/results/export-time-<stamp>.{json,md}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# setting -> the shortcuts it turns off
LATER = ["shape_only_quant_ops", "shared_provenance", "preprocess_on_two_cores", "lower_methods"]
SETTINGS = {"none": ["applicable_passes", *LATER], "passes": LATER, "one-process": ["lower_methods"],
            "shipped": []}
# the child: `omnidraft export`, with the shortcuts named in its first argument turned off (the
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


def export_once(model: str, role: str, setting: str, out: Path) -> dict:
    """One export in a child process: its own reported seconds, the wall time, the program's sha256."""
    argv = [sys.executable, "-c", CHILD, ",".join(SETTINGS[setting]), "export", f"--{role}", model,
            "--quant", "8da8w", "--max-seq", "1024", "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    info = json.loads((out / "program.json").read_text())
    return {"model": model, "role": role, "setting": setting, "export_s": info["export_seconds"],
            "wall_s": round(wall, 1), "sha256": hashlib.sha256((out / "program.pte").read_bytes()).hexdigest()}


def main() -> None:
    from benchio import save, stamp_report, table

    from omnidraft.device.cpu import cpu_info
    from omnidraft.quiet import quiet_libraries

    quiet_libraries()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2-135m,qwen2.5-coder-0.5b",
                    help="comma-separated; the first is exported as a drafter, the rest as targets")
    ap.add_argument("--settings", default="one-process,shipped",
                    help=f"comma-separated, of {', '.join(SETTINGS)}")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", default=str(HERE.parent / "bench" / "results"))
    args = ap.parse_args()
    models, settings = args.models.split(","), args.settings.split(",")
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        ap.error(f"unknown setting {unknown[0]!r} (use {', '.join(SETTINGS)})")
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        for r in range(args.rounds):
            for i, model in enumerate(models):
                role = "drafter" if i == 0 else "target"
                for setting in settings if r % 2 == 0 else settings[::-1]:
                    run = export_once(model, role, setting, Path(tmp) / f"{model}-{r}-{setting}")
                    print(json.dumps(run), flush=True)
                    runs.append(run)
    cpu = cpu_info()
    report = stamp_report(cpu=cpu, runs=runs)
    rows = []
    for model in models:
        mine = [x for x in runs if x["model"] == model]
        best = [min(x["export_s"] for x in mine if x["setting"] == s) for s in settings]
        same = len({x["sha256"] for x in mine}) == 1
        rows.append([model, mine[0]["role"], *best, f"{best[-1] / best[0]:.2f}x", "yes" if same else "NO"])
    md = ["Seconds of "
          "`omnidraft export` (torch.export + lowering + writing; program.json's export_seconds; the best "
          f"of {args.rounds} round(s)), 8da8w, max_seq 1024, each export alone in its own process.", "",
          "Settings (the lowering's shortcuts on): none; passes = only the XNNPACK passes that can change "
          "a partition; one-process = that, torchao's quantisation ops propagated as a lookup, provenance "
          "records shared between passes and the partitions preprocessed on two cores; shipped = that, and "
          "a target's two methods lowered side by side (the second in a forked child).", "",
          *table(["model", "role", *[f"{s} (s)" for s in settings], f"{settings[-1]} / {settings[0]}",
                  "same program bytes"], rows),
          "", f"`{report['command']}`"]
    save(args.out, "export-time", "Export time with and without the lowering's shortcuts", report, md)


if __name__ == "__main__":
    main()
