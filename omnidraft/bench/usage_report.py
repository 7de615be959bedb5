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

FIELDS = ("tokens_per_s", "forwards_per_token", "acceptance")


def write(result: dict, out: str | Path, keep: bool, log: Callable[[str], None]) -> Path:
    stem = report.write(out, "bench-usage", "omnidraft bench usage: the pair with use (a prompt stream, the real "
                        "daemon, held-out measurements)", result, markdown(result), keep=keep)
    plot(result, stem.with_suffix(".png"), log)
    return stem


def markdown(result: dict) -> list[str]:
    from omnidraft.jobs.pairing import format_report

    o, kinds = result["options"], result["kinds"]
    recurring = f" + {o['recurring']} of each recurring kind (tests, extract, reply)" if o["recurring"] else ""
    md = [result["question"], "",
          f"Drafter {o['drafter']} ({result['drafter_runtime']}), target {o['target']} ({result['target_runtime']}), "
          f"greedy, draft length: {'k = ' + str(o['k']) if o['k'] is not None else 'the cost model'}'s. Stream: "
          f"{result['stream_prompts']} prompts ({o['code']} HumanEval + {o['chat']} ShareGPT{recurring}, the kinds "
          f"taking turns), {o['stream_tokens']} new tokens each, a record logged and the answer remembered per "
          f"prompt; the daemon (`omnidraft daemon run`, config {o['daemon_config'] or 'its defaults'}) runs beside "
          f"it for {o['busy_block']} prompts and is stopped for the next {o['busy_block']}, in turn, and is frozen "
          f"while the held-out set is timed: {o['held']} prompts of each kind ({', '.join(kinds)}) never in the "
          f"stream, {o['max_new_tokens']} new tokens each. Before the stream the starting pair, the target alone and "
          "the baselines run per held-out prompt with the rows rotated; after it (the daemon drained) the cold pair "
          "(the starting adapter, no memory), memory only, the last version (the daemon only), the last version with "
          "the memory and the target alone, likewise.", "",
          "`omnidraft pair`'s report before the stream:", "", "```", format_report(result["pairing"]), "```", ""]
    rows = [[m["label"], m["prompts_seen"], m.get("version") or "-"] + [m[k]["tokens_per_s"] for k in kinds]
            + [m["all"][f] for f in FIELDS] for m in result["measurements"]]
    md += ["Held-out measurements over the stream (the pair as it was then, no memory):", ""]
    md += table(["pair", "stream prompts seen", "adapter"] + [f"{k} tok/s" for k in kinds]
                + [f"all {f.replace('_', ' ')}" for f in FIELDS], rows)
    md += ["", "Each row of the result (held-out prompts):", ""]
    md += table(["row", "tokens/s"] + [f"{k} tok/s" for k in kinds] + ["forwards per token"],
                [[name, r["tokens_per_s"]] + [r[k]["tokens_per_s"] for k in kinds]
                 + [r["forwards_per_token"] if r["forwards_per_token"] is not None else "-"]
                 for name, r in result["rows"].items()])
    routed = [f"{name}: " + ", ".join(f"{n} on {rt}" for rt, n in sorted(r["runtimes"].items()))
              for name, r in result["rows"].items() if r.get("runtimes")]
    if routed:
        md += ["", "Generations by target runtime (a pair routes each generation; target forwards are counted on "
               "the program's): " + "; ".join(routed) + "."]
    md += ["", "After the stream, interleaved per prompt, against the cold pair (tokens/s ratio; target forwards "
           "per token's change) and the target alone:", ""]
    md += table(["row", *kinds, "all", "all vs the target alone"],
                [[name, *(_ratio(v[k]) for k in [*kinds, "all"]), f"{v['all']['vs_target_alone']}x"]
                 for name, v in result["summary"].items()])
    m = result.get("memory")
    if m and m.get("spaces"):
        sp = m["spaces"][0]
        md += ["", f"The pair's memory after the stream: {sp['entries']} answers, {sp['tokens']} tokens, "
               f"{m['file_bytes'] / 2**20:.1f} MiB on disk (bound {m['max_bytes'] / 2**20:.0f} MiB), its index "
               f"{m['index_bytes'] / 2**20:.1f} MiB in RAM."]
    if result.get("peak_rss_bytes"):
        md += ["", f"This process's peak RSS (every row's models loaded at once): {result['peak_rss_bytes'] / 2**30:.2f} GB."]
    b = result["busy_stream"]
    md += ["", f"The busy stream: {b['daemon_running']} tokens/s with the daemon running beside it, "
           f"{b['daemon_stopped']} with it stopped ({b['ratio']}x; {b['tokens']['running']} and "
           f"{b['tokens']['stopped']} tokens)."]
    md += ["", "Daemon rounds: " + ("; ".join(
        f"{r['status']} {r.get('version', '')} ({len(r.get('record_ids', []))} new + "
        f"{len(r.get('replayed_ids', []))} replayed records, held-out {r.get('acceptance_before')} -> "
        f"{r.get('acceptance_after')}, {r.get('seconds')} s)" for r in result["rounds"]) or "none"),
           "" if result.get("drained") else "(the daemon had not trained on every record when the run ended)"]
    return md


def _ratio(v: dict) -> str:
    change = v["forwards_change"]
    return f"{v['vs_cold_pair']}x ({'-' if change is None else format(change, '+.1%')})"


def plot(result: dict, path: Path, log: Callable[[str], None]) -> None:
    try:
        import matplotlib
    except ImportError:
        log("matplotlib not installed (pip install -e '.[bench]'): no curve")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts, kinds = result["measurements"], result["kinds"]
    fixed = {name: r for name, r in result["rows"].items() if name in ("cold pair", "last version + memory",
                                                                        "target alone (after)")}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, field, name in ((axes[0], "tokens_per_s", "held-out tokens/s"),
                            (axes[1], "forwards_per_token", "target forwards per generated token")):
        for kind, color in zip(kinds, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")):
            ax.plot([m["prompts_seen"] for m in pts], [m[kind][field] for m in pts], marker="o", color=color,
                    label=f"pair, {kind}")
            for (row, r), style in zip(fixed.items(), ("--", ":", "-.")):
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

