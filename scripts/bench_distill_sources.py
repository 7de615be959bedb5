"""Which records buy the most held-out acceptance per CPU-hour (#54): `omnidraft distill` on the
same corpus prompts with each record source, every run on its own scratch home (the models and
GGUFs linked from the current one), nothing published. teacher: the target's distributions
teacher-forced over the corpus answers (HumanEval's canonical solutions, ShareGPT's replies);
greedy: over the target's own greedy answers to the same prompts; mix: greedy for chat, teacher
for code. Each run's held-out set is the same (the target's greedy answers to HumanEval 40-63
and our chat prompts 10-19), so the acceptance before is the same and the gain is comparable.
CPU seconds are the distill process's user + system time for the run (held-out records included,
the same work for every source).

  python scripts/bench_distill_sources.py --target qwen2.5-coder-0.5b --code 20 --chat 40
Writes bench/results/distill-sources-<stamp>.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SHARED = ("gguf", "models", "packages", "tokenizers", "vocab")  # what a scratch home borrows


def scratch_home(root: Path, source: str) -> Path:
    """``root/source`` with the current home's model folders linked in (not copied)."""
    from omnidraft.home import home

    here, dest = home(), root / source
    dest.mkdir(parents=True, exist_ok=True)
    for name in SHARED:
        if (here / name).is_dir() and not (dest / name).exists():
            (dest / name).symlink_to(here / name)
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-0.5b")
    ap.add_argument("--drafter", default="smollm2-135m")
    ap.add_argument("--sources", nargs="+", default=["teacher", "greedy", "mix"])
    ap.add_argument("--code", type=int, default=20)
    ap.add_argument("--chat", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--root", default="/tmp/omnidraft-distill-sources", help="the scratch homes' folder")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    from omnidraft.device.threads import configure_process, set_threads

    configure_process()
    set_threads(args.threads)
    import benchio

    from omnidraft.jobs.distill import DistillConfig, distill
    from omnidraft.device.cpu import cpu_info
    from omnidraft.quiet import quiet_libraries

    quiet_libraries()
    runs = {}
    for source in args.sources:
        os.environ["OMNIDRAFT_HOME"] = str(scratch_home(Path(args.root), source))
        cfg = DistillConfig(code=args.code, chat=args.chat, source=source, epochs=args.epochs)
        runs[source] = distill(args.target, args.drafter, cfg, publish=False,
                               say=lambda s, src=source: print(f"[{src}] {s}", file=sys.stderr, flush=True))
    cpu = cpu_info()
    header = ["source", "corpus target positions", "records s", "training s", "CPU-hours", "held-out acceptance",
              "gain (points)", "gain per CPU-hour", "won / lost positions", "p (worse)"]
    table = []
    for source, r in runs.items():
        cpu_h = r["cpu_seconds_this_run"] / 3600
        gain = 100 * (r["acceptance_after"] - r["acceptance_before"])
        table.append([source, r["corpus_target_positions"], r["records"].get("seconds", ""), r["train_seconds"],
                      f"{cpu_h:.3f}", f"{r['acceptance_before']} -> {r['acceptance_after']}", f"{gain:+.1f}",
                      f"{gain / cpu_h:+.1f}" if cpu_h else "", f"{r['guard_wins']} / {r['guard_losses']}",
                      r["guard_p_worse"]])
    report = benchio.stamp_report(drafter=args.drafter, target=args.target, cpu=cpu, threads=args.threads,
                                  code=args.code, chat=args.chat, epochs=args.epochs, runs=runs)
    md = [f"{args.drafter} -> {args.target}: `omnidraft distill` on {args.code} HumanEval + {args.chat} ShareGPT "
          f"prompts, {args.epochs} epochs, one run per record source on its own home, nothing published; held-out: "
          f"the target's greedy answers to HumanEval 40-63 and chat prompts 10-19. CPU: "
          f"{benchio.cpu_line(cpu, args.threads)}.", "", *benchio.table(header, table), "",
          "CPU-hours: the process's user + system time for the run, held-out records (the same work for every "
          "source) included. Gain: held-out teacher-forced greedy acceptance after minus before, in points."]
    benchio.save(args.out, "distill-sources", "Which records buy the most acceptance per CPU-hour", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
