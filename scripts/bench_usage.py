"""Benchmark: does the pair get faster with use, as a user experiences it? (#20)

A stream of prompts (HumanEval code problems and ShareGPT first turns through the chat template,
alternating) is generated through `omnidraft.Session` with the product's defaults: ExecuTorch
drafter and target, the cost model's draft length (or --k), a training record logged per
generation. The real fine-tuning daemon runs beside it as its own process (`omnidraft daemon
run`, started by `daemon.start` with --daemon-config) and publishes adapter versions; the
session picks each up at its next generation (the drafter program swaps the version's .ptd).

Every --measure-every stream prompts, when a version newer than the last measured one exists,
a fixed held-out set (code and chat prompts never in the stream) is generated unlogged with the
daemon stopped (SIGSTOP: the 2 cores are the session's while it is timed; SIGCONT after):
tokens/s, target forwards per generated token, acceptance. Before the stream, per held-out
prompt in turn: the starting pair, the target alone (same runtime, same session), llama.cpp's
target alone and transformers' assisted generation at its best setting (omnidraft/bench/baselines.py);
after it, once the daemon has trained on everything, the last version and the target alone,
again per prompt in turn.

Runs in a scratch $OMNIDRAFT_HOME (--home) that links the real home's models, programs and
vocabularies, so the pair starts from what `omnidraft pair` installs on a fresh home: the
pre-adapted adapter where one ships for the pair (#54), else the zero adapter. Writes bench/results/usage-<stamp>.json/.md/.png.
Example:
  python scripts/bench_usage.py --target qwen2.5-coder-1.5b --code 150 --chat 150
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

SHARED = ("models", "programs", "vocab", "gguf", "packages")  # linked from the real home


def scratch_home(path: Path) -> Path:
    """A fresh home whose model, program and vocabulary folders are the real home's."""
    from omnidraft.home import home

    real = home()
    path.mkdir(parents=True, exist_ok=False)
    for name in SHARED:
        if (real / name).is_dir():
            (path / name).symlink_to(real / name)
    return path


@contextmanager
def daemon_stopped(pid: int):
    """The daemon process frozen (SIGSTOP) for the duration: timings get the 2 cores alone."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _baselines(args, log) -> dict:
    """{name: row}: llama.cpp alone (where installed) and transformers' assisted generation at its best setting."""
    from omnidraft.bench.baselines import AssistedRow, LlamaCppRow

    rows = [LlamaCppRow.make(args.target, args.threads, log), AssistedRow(args.target, args.drafter)]
    return {r.name: r for r in rows if r is not None}


def side_by_side(session, prompts: list[tuple[str, bool]], max_new_tokens: int, others: list) -> dict[str, dict]:
    """Per prompt, the rows' order rotated (omnidraft/measure/interleave.py): the session's pair
    (unlogged) and each of ``others`` (bench rows: the target alone through a Session on the same
    runtime, the baselines) on the same prompt. {row name ("pair" for the session): {kind (code /
    chat): figures}}; a row without drafts has no acceptance, one without target forwards counted none."""
    from omnidraft.bench.rows import Prompt, SessionRow
    from omnidraft.measure.interleave import interleaved
    from omnidraft.measure.tally import Tally

    asked = [Prompt("chat" if chat else "code", text, chat) for text, chat in prompts]
    tallies: dict[tuple[str, str], Tally] = {}
    with session.unlogged():
        for _, prompt, row, got in interleaved(asked, [SessionRow("pair", session), *others],
                                               lambda row, p: row.run(p, max_new_tokens)):
            got.into(tallies.setdefault((row.name, prompt.set), Tally()))
    out: dict[str, dict] = {}
    for (name, kind), t in tallies.items():
        acc, per_forward = t.acceptance(), t.tokens_per_forward()
        out.setdefault(name, {})[kind] = {
            "tokens_per_s": round(t.tokens_per_s(), 3), "tokens": t.tokens,
            "forwards_per_token": round(t.forwards / t.tokens, 4) if per_forward is not None and t.tokens else None,
            "acceptance": None if acc is None else round(acc, 4)}
    return out


def wait_idle(daemon, pair: str, timeout_s: float, log) -> bool:
    """Until the daemon reports nothing left to train for ``pair`` (or ``timeout_s``)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        st = daemon.status()
        last = st.get("last") or {}
        if st.get("state") == "idle" and st.get("pair") == pair and last.get("status") == "waiting":
            return True
        if not st.get("running"):
            log("the daemon is not running")
            return False
        time.sleep(0.5)  # not the daemon's own poll period: in step with it, every look saw "training"
    return False


def render(report: dict, out: str) -> None:
    from benchio import save, table

    cpu = report["cpu"]
    md = [f"Drafter {report['drafter']} ({report['drafter_runtime']}), target {report['target']} "
          f"({report['target_runtime']}), greedy, draft length: {report['draft_length']}. Stream: "
          f"{report['stream_prompts']} prompts ({report['code']} HumanEval + {report['chat']} ShareGPT, alternating), "
          f"{report['stream_tokens']} new tokens each, a record logged per prompt; the daemon "
          f"(`omnidraft daemon run`, config {json.dumps(report['daemon_config'])}) trains beside it and is "
          f"frozen while the held-out set is timed: {report['held_code']} code + {report['held_chat']} chat "
          f"prompts never in the stream, {report['held_tokens']} new tokens each. `{report['command']}`", ""]
    if report.get("pairing"):
        from omnidraft.jobs.pairing import format_report

        md += ["`omnidraft pair`'s report before the stream:", "", "```", format_report(report["pairing"]), "```", ""]
    rows = []
    for m in report["measurements"]:
        rows.append([m["label"], m["prompts_seen"], m.get("version") or "-"]
                    + [m[k][f] for k in ("code", "chat") for f in ("tokens_per_s", "forwards_per_token", "acceptance")])
    md += table(["row", "stream prompts seen", "adapter", "code tok/s", "code forwards/token", "code acceptance",
                 "chat tok/s", "chat forwards/token", "chat acceptance"], rows)
    s = report["summary"]
    others = [m for m in report["measurements"] if m["label"] in report.get("baselines", [])]
    if others:
        md += ["", "The baselines, measured before the stream per prompt in turn with the starting pair and the "
               "target alone: " + "; ".join(f"{m['label']} code {m['code']['tokens_per_s']} / chat "
                                           f"{m['chat']['tokens_per_s']} tok/s" for m in others)]
    md += ["", "Last version vs the starting pair (same session, same run): "
           + "; ".join(f"{k}: tokens/s {v['speedup_vs_start']}x, forwards/token {v['forwards_change']:+.1%}, "
                       f"vs the target alone {v['vs_target_alone']}x" for k, v in s.items())]
    md += ["", "Daemon rounds: " + "; ".join(f"{r['status']} {r.get('version', '')} ({len(r.get('record_ids', []))} new"
                                             f" + {len(r.get('replayed_ids', []))} replayed records, held-out "
                                             f"{r.get('acceptance_before')} -> {r.get('acceptance_after')}, "
                                             f"{r.get('seconds')} s)" for r in report["rounds"])]
    stem = save(out, "usage", "The pair with use: a prompt stream, the real daemon, held-out measurements", report, md)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no curve", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    pts = [m for m in report["measurements"] if m["label"].startswith(("starting", "version", "final"))]
    alone = [m for m in report["measurements"] if m["label"].startswith("target alone")]
    for ax, field, name in ((axes[0], "tokens_per_s", "held-out tokens/s"),
                            (axes[1], "forwards_per_token", "target forwards per generated token")):
        for kind, color in (("code", "tab:blue"), ("chat", "tab:orange")):
            ax.plot([m["prompts_seen"] for m in pts], [m[kind][field] for m in pts], marker="o", color=color,
                    label=f"pair, {kind}")
            ax.axhline(pts[0][kind][field], color=color, linestyle=":", label=f"starting pair, {kind}")
            if alone:
                ax.axhline(alone[0][kind][field], color=color, linestyle="--", label=f"target alone, {kind}")
            for m, style in zip([m for m in report["measurements"] if m["label"] in report.get("baselines", [])],
                                ("-.", (0, (1, 1)))):
                if m[kind][field] is not None:
                    ax.axhline(m[kind][field], color=color, linestyle=style, alpha=0.6, label=f"{m['label']}, {kind}")
        ax.set_xlabel("stream prompts seen")
        ax.set_ylabel(name)
        ax.legend(fontsize=7)
    fig.suptitle(f"{report['drafter']} -> {report['target']}: adaptation with use ({cpu['model']}, "
                 f"{report['threads']} threads)", fontsize=9)
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=120)


def main() -> int:
    from omnidraft.device.threads import configure_process

    configure_process()
    import benchsetup

    ap = benchsetup.parser(__doc__, target="qwen2.5-coder-1.5b", dtype="--dtype", k=False, max_new_tokens=64)
    ap.add_argument("--code", type=int, default=150, help="HumanEval prompts in the stream")
    ap.add_argument("--chat", type=int, default=150, help="ShareGPT prompts in the stream")
    ap.add_argument("--held-code", type=int, default=12, help="held-out HumanEval prompts (the last ones)")
    ap.add_argument("--held-chat", type=int, default=12, help="held-out ShareGPT prompts (after the stream's)")
    ap.add_argument("--stream-tokens", type=int, default=48, help="new tokens per stream prompt")
    ap.add_argument("--k", type=int, default=None, help="draft length (default: the cost model's)")
    ap.add_argument("--measure-every", type=int, default=50, help="stream prompts between held-out measurements")
    ap.add_argument("--daemon-config", default=None, help="JSON of the daemon's RoundConfig (default: its defaults)")
    ap.add_argument("--poll", type=float, default=2.0, help="the daemon's poll interval, s")
    ap.add_argument("--drain-minutes", type=float, default=20.0,
                    help="after the stream, how long to wait for the daemon to train on the rest")
    ap.add_argument("--calibration-s", type=float, default=60.0,
                    help="`omnidraft pair`'s calibration budget (the user's first step; the cost model's acceptance)")
    ap.add_argument("--no-baselines", action="store_true", help="skip llama.cpp and transformers' assisted generation")
    ap.add_argument("--home", default=None, help="the scratch home (default: <real home>/usage-runs/<stamp>)")
    args = ap.parse_args()
    log = benchsetup.logger("usage")

    from omnidraft.home import home

    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = scratch_home(Path(args.home) if args.home else home() / "usage-runs" / stamp)
    os.environ["OMNIDRAFT_HOME"] = str(root)  # this process and the daemon it starts
    log(f"scratch home {root}")
    benchsetup.start(args.threads)

    import benchio
    from omnidraft import Session
    from omnidraft.bench.rows import target_alone
    from omnidraft.jobs.pairing import format_report, pair
    from omnidraft.device.cpu import cpu_info
    from omnidraft.pairs.settings import Runtime
    from omnidraft.prompts import humaneval, sharegpt
    from omnidraft.train import daemon
    from omnidraft.train.tuning import history

    code_all = humaneval()
    if args.code + args.held_code > len(code_all):
        ap.error(f"--code + --held-code must be <= {len(code_all)} HumanEval problems")
    code, held_code = code_all[: args.code], code_all[len(code_all) - args.held_code:]
    chats = sharegpt(args.chat + args.held_chat)
    chat, held_chat = chats[: args.chat], chats[args.chat:]
    stream = []
    for i in range(max(len(code), len(chat))):
        stream += [(code[i], False)] if i < len(code) else []
        stream += [(chat[i], True)] if i < len(chat) else []
    held = [(p, False) for p in held_code] + [(p, True) for p in held_chat]

    session = Session(args.drafter, args.target, k=args.k, runtime=Runtime(dtype=args.dtype))
    cfg = daemon.load_config(args.daemon_config)
    # the user's first step, `omnidraft pair`: the starting adapter, the cost model's acceptance per position
    paired = pair(args.target, args.drafter, session=session, calibration_s=args.calibration_s)
    log(format_report(paired))
    report = benchio.stamp_report(
        cpu=cpu_info(), threads=args.threads, drafter=args.drafter, target=args.target,
        drafter_runtime=session.drafter_runtime, target_runtime=session.target_runtime,
        draft_length=f"k = {args.k}" if args.k is not None else "the cost model's",
        stream_prompts=len(stream), code=len(code), chat=len(chat), stream_tokens=args.stream_tokens,
        held_code=len(held_code), held_chat=len(held_chat), held_tokens=args.max_new_tokens,
        daemon_config=json.loads(Path(args.daemon_config).read_text()) if args.daemon_config else {},
        round_config=str(cfg), pairing=paired, measurements=[], stream_log=[])
    name = session.spec.name

    def record(label: str, seen: int, numbers: dict):
        row = {"label": label, "prompts_seen": seen, "version": session.version, "time": time.time(), **numbers}
        report["measurements"].append(row)
        log(json.dumps(row))

    alone_row = target_alone(args.target, Runtime(target=session.target_runtime, dtype=args.dtype, threads=args.threads))
    runs = {} if args.no_baselines else _baselines(args, log)
    before = side_by_side(session, held, args.max_new_tokens, [alone_row, *runs.values()])
    record("target alone (before)", 0, before[alone_row.name])
    record(f"starting pair ({paired['adapter_start']} {paired['adapter']})", 0, before["pair"])
    report["baselines"] = list(runs)
    for name in runs:
        record(name, 0, before[name])
    del runs  # the baselines' models leave memory before the daemon trains
    pid = daemon.start(args.poll, config=args.daemon_config)
    log(f"daemon pid {pid}")
    measured = session.version  # the adapter pairing started from
    t0 = time.perf_counter()
    try:
        for n, (prompt, is_chat) in enumerate(stream, 1):
            m = session.generate(prompt, max_new_tokens=args.stream_tokens, chat=is_chat).metrics
            report["stream_log"].append({"n": n, "chat": is_chat, "version": session.version,
                                         "tokens_per_s": m["tokens_per_s"], "acceptance": m["acceptance_rate"]})
            if n % args.measure_every == 0 or n == len(stream):
                log(f"{n}/{len(stream)} stream prompts, adapter {session.version}, "
                    f"{time.perf_counter() - t0:.0f} s")
                if session.refresh() is not None and session.version != measured:
                    with daemon_stopped(pid):
                        record(f"version {session.version}", n, side_by_side(session, held, args.max_new_tokens, [])["pair"])
                    measured = session.version
        log("stream done; waiting for the daemon to train on the rest")
        drained = wait_idle(daemon, name, args.drain_minutes * 60, log)
        report["drained"] = drained
    finally:
        daemon.stop()
    session.refresh()
    after = side_by_side(session, held, args.max_new_tokens, [alone_row])
    if session.version is not None and session.version != measured:
        record(f"final {session.version}", len(stream), after["pair"])
    record("target alone (after)", len(stream), after[alone_row.name])
    report["rounds"] = history(session.spec)
    report["stream_seconds"] = round(time.perf_counter() - t0, 1)
    start = report["measurements"][1]
    last = [m for m in report["measurements"] if m["label"].startswith(("version", "final"))] or [start]
    last = last[-1]
    alone = report["measurements"][-1]  # the target alone after the stream, per prompt in turn with `last`
    report["summary"] = {
        kind: {"speedup_vs_start": round(last[kind]["tokens_per_s"] / start[kind]["tokens_per_s"], 3),
               "forwards_change": round(last[kind]["forwards_per_token"] / start[kind]["forwards_per_token"] - 1, 4),
               "vs_target_alone": round(last[kind]["tokens_per_s"] / alone[kind]["tokens_per_s"], 3)}
        for kind in ("code", "chat")}
    session.close()
    alone_row.session.close()
    render(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
