"""The ``usage`` suite's result as markdown (the measurements over the stream, the baselines, the
daemon's rounds) and a PNG of held-out tokens/s and target forwards per token against stream
prompts seen; written and compared with the last comparable run by measure/report.py.

Knows the result's layout (bench/usage.py); nothing about how it was measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from omnidraft.measure import report
from omnidraft.measure.report import table

KINDS = ("code", "chat")
FIELDS = ("tokens_per_s", "forwards_per_token", "acceptance")


def write(result: dict, out: str | Path, keep: bool, log: Callable[[str], None]) -> Path:
    stem = report.write(out, "bench-usage", "omnidraft bench usage: the pair with use (a prompt stream, the real "
                        "daemon, held-out measurements)", result, markdown(result), keep=keep)
    plot(result, stem.with_suffix(".png"), log)
    return stem


def markdown(result: dict) -> list[str]:
    from omnidraft.jobs.pairing import format_report

    o = result["options"]
    md = [result["question"], "",
          f"Drafter {o['drafter']} ({result['drafter_runtime']}), target {o['target']} ({result['target_runtime']}), "
          f"greedy, draft length: {'k = ' + str(o['k']) if o['k'] is not None else 'the cost model'}'s. Stream: "
          f"{result['stream_prompts']} prompts ({o['code']} HumanEval + {o['chat']} ShareGPT, alternating), "
          f"{o['stream_tokens']} new tokens each, a record logged per prompt; the daemon (`omnidraft daemon run`, "
          f"config {o['daemon_config'] or 'its defaults'}) trains beside it and is frozen while the held-out set "
          f"is timed: {o['held']} code + {o['held']} chat prompts never in the stream, {o['max_new_tokens']} new "
          "tokens each. Before the stream the starting pair, the target alone and the baselines run per held-out "
          "prompt with the rows rotated; after it the last version and the target alone.", "",
          "`omnidraft pair`'s report before the stream:", "", "```", format_report(result["pairing"]), "```", ""]
    rows = [[m["label"], m["prompts_seen"], m.get("version") or "-"] + [m[k][f] for k in KINDS for f in FIELDS]
            for m in result["measurements"]]
    md += table(["pair", "stream prompts seen", "adapter"] + [f"{k} {f.replace('_', ' ')}" for k in KINDS
                                                            for f in FIELDS], rows)
    md += ["", "Each row of the result (held-out prompts, code and chat together):", ""]
    md += table(["row", "tokens/s", "code tokens/s", "chat tokens/s", "forwards per token"],
                [[name, r["tokens_per_s"], r["code"]["tokens_per_s"], r["chat"]["tokens_per_s"],
                  r["forwards_per_token"] if r["forwards_per_token"] is not None else "-"]
                 for name, r in result["rows"].items()])
    md += ["", "Last version against the starting pair (same session, same run): " + "; ".join(
        f"{k}: tokens/s {v['speedup_vs_start']}x, forwards/token "
        f"{'-' if v['forwards_change'] is None else format(v['forwards_change'], '+.1%')}, vs the target alone "
        f"{v['vs_target_alone']}x" for k, v in result["summary"].items())]
    md += ["", "Daemon rounds: " + ("; ".join(
        f"{r['status']} {r.get('version', '')} ({len(r.get('record_ids', []))} new + "
        f"{len(r.get('replayed_ids', []))} replayed records, held-out {r.get('acceptance_before')} -> "
        f"{r.get('acceptance_after')}, {r.get('seconds')} s)" for r in result["rounds"]) or "none"),
           "" if result.get("drained") else "(the daemon had not trained on every record when the run ended)"]
    return md


def plot(result: dict, path: Path, log: Callable[[str], None]) -> None:
    try:
        import matplotlib
    except ImportError:
        log("matplotlib not installed (pip install -e '.[bench]'): no curve")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = result["measurements"]
    fixed = {name: r for name, r in result["rows"].items() if name not in ("starting pair", "last version")}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, field, name in ((axes[0], "tokens_per_s", "held-out tokens/s"),
                            (axes[1], "forwards_per_token", "target forwards per generated token")):
        for kind, color in (("code", "tab:blue"), ("chat", "tab:orange")):
            ax.plot([m["prompts_seen"] for m in pts], [m[kind][field] for m in pts], marker="o", color=color,
                    label=f"pair, {kind}")
            for (row, r), style in zip(fixed.items(), ("--", ":", "-.", (0, (1, 1)))):
                if r[kind][field] is not None:
                    ax.axhline(r[kind][field], color=color, linestyle=style, alpha=0.7, label=f"{row}, {kind}")
        ax.set_xlabel("stream prompts seen")
        ax.set_ylabel(name)
        ax.legend(fontsize=6)
    o = result["options"]
    fig.suptitle(f"{o['drafter']} -> {o['target']}: adaptation with use ({result['cpu']['line']})", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log(f"curves: {path}")

