"""Benchmark: which training-round settings make the drafter learn most from a user's stream (#20).

Replays the verification log of a real usage run (scripts/bench_usage.py writes one in its
scratch home) through the daemon's own round function (train/tuning.py run_round: LoRA
distillation, the interleaved acceptance head, the regression guard, publishing), once per
setting, in a fresh scratch home each: the records arrive in blocks of --block in stream order
and rounds run until nothing is left, as the daemon would. After each block the latest published
version is scored teacher-forced on every held-out record of the log (id a multiple of the
round's holdout_every: never trained on by any setting), split into code and chat prompts: the
share of the target's tokens that the drafter's argmax gets right (the guard's measure; what
greedy acceptance follows). Writes bench/results/trainer-<stamp>.json/.md/.png.
Example:
  python scripts/bench_trainer.py --log-home ~/.cache/omnidraft/usage-runs/r1 \\
      --setting default='{}' --setting lr3e-4='{"train": {"lr": 3e-4}}'
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

DEFAULT_SETTINGS = {  # over RoundConfig's defaults (LoRA r32 q/k/v/o, lr 1e-3, replay 64, forward KL)
    "the default": {},
    "reverse KL, the paper's (the default before)": {"train": {"divergence": "kl"}},
    "LoRA on q/k/v/o + MLP (needs a program exported with those modules)":
        {"train": {"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}},
    "LoRA rank 64": {"train": {"rank": 64, "alpha": 64}},
}


def scores(model, held: dict) -> dict:
    """Teacher-forced match rate of ``model`` on each kind's held-out records."""
    from omnidraft.train.tuning import match_hits

    out = {}
    for kind, recs in held.items():
        hits = match_hits(model, recs)
        out[kind] = round(float(hits.float().mean()), 4) if hits.numel() else None
    return out


def run_setting(name: str, fields: dict, rows, spec, held: dict, home: Path, block: int, log) -> dict:
    """Feed ``rows`` block by block to the log of a fresh ``home`` and run the daemon's rounds."""
    from peft import PeftModel

    from omnidraft.models.loading import load_model
    from omnidraft.pairs.spec import adapter_store, log_path, save_spec
    from omnidraft.train.tuning import RoundConfig, run_round
    from omnidraft.train.verlog import VerificationLog

    home.mkdir(parents=True)
    (home / "models").symlink_to(Path(os.environ["OMNIDRAFT_REAL_HOME"]) / "models")
    os.environ["OMNIDRAFT_HOME"] = str(home)
    save_spec(spec)
    cfg = RoundConfig.from_dict(fields)
    log_db, store = VerificationLog(log_path()), adapter_store()
    curve, rounds, t0 = [], [], time.perf_counter()
    for start in range(0, len(rows), block):
        for _rid, prompt, data in rows[start: start + block]:
            log_db.append(spec.name, prompt, data)
        while True:
            result = run_round(spec, log_db, store, load_model(spec.drafter, dtype="fp32").model, cfg)
            if result["status"] == "waiting":
                break
            rounds.append({k: v for k, v in result.items() if k not in ("record_ids", "replayed_ids")})
        version = store.latest(spec.name)
        base = load_model(spec.drafter, dtype="fp32").model
        model = PeftModel.from_pretrained(base, str(store.path(spec.name, version))) if version else base
        point = {"records_seen": min(start + block, len(rows)), "version": version, **scores(model.eval(), held)}
        curve.append(point)
        log(f"{name}: {json.dumps(point)}")
    log_db.close()
    return {"setting": name, "fields": fields, "round_config": str(cfg), "curve": curve, "rounds": rounds,
            "published": sum(r["status"] == "published" for r in rounds),
            "rejected": sum(r["status"] == "rejected" for r in rounds),
            "train_seconds": round(sum(r["seconds"] for r in rounds), 1),
            "wall_seconds": round(time.perf_counter() - t0, 1)}


def render(report: dict, out: str) -> None:
    from benchio import save, table

    md = [f"Log: {report['records']} records of `{report['log_home']}` ({report['pair']}); held-out "
          f"{report['held']['code']} code + {report['held']['chat']} chat records (teacher-forced match rate of the "
          f"drafter's argmax; untrained: code {report['untrained']['code']}, chat {report['untrained']['chat']}); "
          f"records arrive in blocks of {report['block']}; {report['threads']} threads. `{report['command']}`", ""]
    rows = []
    for s in report["settings"]:
        last = s["curve"][-1]
        best = max(s["curve"], key=lambda p: (p["code"] or 0) + (p["chat"] or 0))
        rows.append([s["setting"], last["code"], last["chat"], f"{best['code']} / {best['chat']} at {best['records_seen']}",
                     f"{s['published']} / {s['rejected']}", s["train_seconds"]])
    md += table(["setting", "code, last", "chat, last", "best (code / chat, at records)", "rounds published / rejected",
                 "training s"], rows)
    stem = save(out, "trainer", "Training-round settings on a real usage stream", report, md)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, kind in zip(axes, ("code", "chat")):
        for s in report["settings"]:
            ax.plot([0] + [p["records_seen"] for p in s["curve"]],
                    [report["untrained"][kind]] + [p[kind] for p in s["curve"]], marker="o", label=s["setting"])
        ax.set_xlabel("stream records seen")
        ax.set_ylabel(f"held-out {kind}: drafter argmax == target token")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=120)


def main() -> int:
    import benchsetup

    ap = benchsetup.parser(__doc__, target=None, k=False)
    ap.add_argument("--log-home", required=True, help="the home whose verification log is replayed")
    ap.add_argument("--pair", default=None, help="the pair in that log (default: its only one)")
    ap.add_argument("--block", type=int, default=80, help="records arriving between rounds")
    ap.add_argument("--setting", action="append", default=[], metavar="NAME=JSON",
                    help="a RoundConfig as JSON (repeatable; default: a learning-rate / replay / epochs sweep)")
    ap.add_argument("--scratch", default="/tmp/omnidraft-trainer-study")
    ap.add_argument("--from-partial", default=None, help="write the tables of an interrupted run from its "
                    "partial.json (in --scratch; the settings finished so far) and exit")
    args = ap.parse_args()
    if args.from_partial:
        render(json.loads(Path(args.from_partial).read_text()), args.out)
        return 0
    log = benchsetup.logger("trainer")
    settings = DEFAULT_SETTINGS
    if args.setting:
        settings = {}
        for s in args.setting:
            name, _, text = s.partition("=")
            settings[name] = json.loads(text)
    from omnidraft.home import home

    os.environ["OMNIDRAFT_REAL_HOME"] = str(home())
    src = Path(args.log_home).expanduser()
    os.environ["OMNIDRAFT_HOME"] = str(src)
    benchsetup.start(args.threads, seed=0)

    import benchio
    from omnidraft.models.loading import load_model
    from omnidraft.pairs.spec import list_specs, load_spec, log_path
    from omnidraft.prompts import humaneval
    from omnidraft.train.records import Record
    from omnidraft.train.tuning import RoundConfig
    from omnidraft.train.verlog import VerificationLog

    spec = load_spec(args.pair) if args.pair else list_specs()[0]
    src_log = VerificationLog(log_path())
    rows = src_log.read(spec.name, after=0, limit=10**9)
    src_log.close()
    every = RoundConfig().holdout_every
    code = set(humaneval())
    held = {"code": [Record.from_bytes(r[2]) for r in rows if r[0] % every == 0 and r[1] in code],
            "chat": [Record.from_bytes(r[2]) for r in rows if r[0] % every == 0 and r[1] not in code]}
    untrained = scores(load_model(spec.drafter, dtype="fp32").model.eval(), held)
    log(f"{len(rows)} records; held-out {len(held['code'])} code + {len(held['chat'])} chat; untrained {untrained}")
    report = benchio.stamp_report(log_home=str(src), pair=spec.name, records=len(rows), block=args.block,
                                  threads=args.threads, held={k: len(v) for k, v in held.items()},
                                  untrained=untrained, settings=[])
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n, (name, fields) in enumerate(settings.items()):
        home = scratch / f"{stamp}-setting{n}"
        report["settings"].append(run_setting(name, fields, rows, spec, held, home, args.block, log))
        (scratch / "partial.json").write_text(json.dumps(report, indent=1))
    render(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
