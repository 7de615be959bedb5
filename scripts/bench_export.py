"""Export time per model (#18): `omnidraft export` of the shipped drafter and target programs, each
with every XNNPACK delegate pass (ExecuTorch's own list) and with only the passes that can change a
partition (export/xnnpack_passes.py, the default). Each export runs alone in a child process; the
two settings alternate per model, and each program's sha256 is recorded (skipping passes must not
change a byte).

  python scripts/bench_export.py --models smollm2-135m,qwen2.5-coder-0.5b
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

SETTINGS = ("every pass", "applicable passes")
# the child: `omnidraft export`, with ExecuTorch's full pass list when asked
CHILD = """
import contextlib, sys
import omnidraft.export.lower as lower
if sys.argv.pop(1) == "every pass":
    lower.applicable_passes = contextlib.nullcontext
from omnidraft.cli import main
sys.exit(main(sys.argv[1:]))
"""


def export_once(model: str, role: str, setting: str, out: Path) -> dict:
    """One export in a child process: its own reported seconds, the wall time, the program's sha256."""
    argv = [sys.executable, "-c", CHILD, setting, "export", f"--{role}", model, "--quant", "8da8w",
            "--max-seq", "1024", "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    info = json.loads((out / "program.json").read_text())
    return {"model": model, "role": role, "setting": setting, "export_s": info["export_seconds"],
            "wall_s": round(wall, 1), "sha256": hashlib.sha256((out / "program.pte").read_bytes()).hexdigest()}


def main() -> None:
    from benchio import save, stamp_report, table

    from omnidraft.pairs.cost import cpu_info

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2-135m,qwen2.5-coder-0.5b",
                    help="comma-separated; the first is exported as a drafter, the rest as targets")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", default=str(HERE.parent / "bench" / "results"))
    args = ap.parse_args()
    models = args.models.split(",")
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        for r in range(args.rounds):
            for i, model in enumerate(models):
                role = "drafter" if i == 0 else "target"
                order = SETTINGS if r % 2 == 0 else SETTINGS[::-1]
                for setting in order:
                    run = export_once(model, role, setting, Path(tmp) / f"{model}-{r}-{setting[0]}")
                    print(json.dumps(run), flush=True)
                    runs.append(run)
    cpu = cpu_info()
    report = stamp_report(cpu=cpu, runs=runs)
    rows = []
    for model in models:
        mine = {s: [x for x in runs if x["model"] == model and x["setting"] == s] for s in SETTINGS}
        before, after = (min(x["export_s"] for x in mine[s]) for s in SETTINGS)
        same = len({x["sha256"] for x in mine[SETTINGS[0]] + mine[SETTINGS[1]]}) == 1
        rows.append([model, mine[SETTINGS[0]][0]["role"], before, after, f"{after / before:.2f}x",
                     "yes" if same else "NO"])
    md = [f"CPU: {cpu['model']}, {cpu['cores']} cores, flags {' '.join(cpu['flags'])}. Seconds of "
          "`omnidraft export` (torch.export + lowering + writing; program.json's export_seconds; the best "
          f"of {args.rounds} round(s)), 8da8w, max_seq 1024, each export alone in its own process.", "",
          *table(["model", "role", "every XNNPACK pass (s)", "applicable passes (s)", "ratio",
                  "same program bytes"], rows),
          "", f"`{report['command']}`"]
    save(args.out, "export-time", "Export time with and without the XNNPACK passes that cannot apply", report, md)


if __name__ == "__main__":
    main()
