"""Per-operator profile of an exported program (ETDump + devtools Inspector) at several call widths
(a target program returns every position's logits, as verification asks; format 3 is told
which rows by a third input).

For each width w: load the program with ETDump on, prefill 64 tokens, then run ``--reps`` calls of w
tokens at position 64 (the static cache is overwritten in place, so every call sees the same state);
report the median wall time and, per operator (XNNPACK's per-kernel events inside DELEGATE_CALL, and
the custom ops outside it), the sum over the method's calls of each event's median (prefill excluded).
``--method decode`` times a program's one-token method (the first cache slots only) instead, after
forward's prefill. Examples (#23, #39):
  python -m omnidraft.tools.profile_program $OMNIDRAFT_HOME/programs/smollm2-135m-8da8w-s1024 --widths 1,2,4,8,16 --threads 2
  python -m omnidraft.tools.profile_program $OMNIDRAFT_HOME/programs/smollm2-135m-8da8w-s1024 --widths 1 --method decode
Writes bench/results/profile-<program>[-<method>]-t<threads>-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path


def profile(prog_dir: Path, width: int, reps: int, scratch: Path, method_name: str = "forward") -> dict:
    import json

    import torch
    from executorch.devtools import Inspector
    from executorch.runtime import Runtime

    info = json.loads((prog_dir / "program.json").read_text())
    target = info["config"].get("role") == "target" and info.get("format", 0) >= 3  # takes ``rows``

    prog = Runtime.get().load_program(str(prog_dir / "program.pte"), data_path=str(prog_dir / "base.ptd"),
                                      enable_etdump=True, debug_buffer_size=0)
    method = prog.load_method("forward")
    timed = prog.load_method(method_name) if method_name != "forward" else method
    rows = (lambda n: [torch.arange(n)]) if target else (lambda n: [])  # a target: every position's logits
    method.execute([torch.arange(64).unsqueeze(0) + 100, torch.tensor([0]), *rows(1)[:1]])  # prefill
    walls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        timed.execute([torch.arange(width).unsqueeze(0) + 500, torch.tensor([64]), *rows(width)])
        walls.append((time.perf_counter() - t0) * 1e3)
    etdump = scratch / f"w{width}.etdp"
    prog.write_etdump_result_to_file(str(etdump), str(scratch / "debug.bin"))
    ops: dict[str, float] = {}
    for block in Inspector(etdump_path=str(etdump)).event_blocks:
        if block.name != "Execute":
            continue
        for ev in block.events:
            if ev.perf_data is not None and len(ev.perf_data.raw) > 1:
                ops[ev.name] = ops.get(ev.name, 0.0) + statistics.median(ev.perf_data.raw[1:])
    return {"wall_ms_median": round(statistics.median(walls), 3),
            "ops_ms": {k: round(v, 3) for k, v in sorted(ops.items(), key=lambda kv: -kv[1])}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("program", type=Path, help="folder with program.pte and base.ptd")
    ap.add_argument("--widths", default="1,2,4,8,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--method", default="forward",
                    help="the method timed (after forward's prefill): forward, or decode (one token, the first window slots)")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    widths = [int(x) for x in args.widths.split(",")]
    if args.method == "decode" and widths != [1]:
        ap.error("--method decode takes one token a call: use --widths 1")
    warnings.filterwarnings("ignore")
    import tempfile

    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (the LLM custom ops)
    import executorch.kernels.quantized  # noqa: F401  (quantised ops outside XNNPACK)
    import torch
    from executorch.extension.pybindings import portable_lib

    from omnidraft.measure.stamp import stamp

    torch.set_num_threads(args.threads)
    portable_lib._unsafe_reset_threadpool(args.threads)
    report = stamp("profile", args.threads, program=str(args.program), method=args.method, reps=args.reps, widths={})
    with tempfile.TemporaryDirectory() as scratch:
        for w in widths:
            report["widths"][w] = profile(args.program, w, args.reps, Path(scratch), args.method)
            top = list(report["widths"][w]["ops_ms"].items())[:4]
            print(f"width {w}: {report['widths'][w]['wall_ms_median']} ms; {top}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
    suffix = "" if args.method == "forward" else f"-{args.method}"
    path = args.out / f"profile-{args.program.name}{suffix}-t{args.threads}-{stamp}.json"
    path.write_text(json.dumps(report, indent=1))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
