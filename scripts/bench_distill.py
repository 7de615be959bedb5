"""The pre-adapted drafter (#54) against the zero adapter, on held-out code and chat prompts that
are not in the distillation corpus (HumanEval 40+, our chat prompts 10+, held-out ShareGPT first
turns), interleaved per prompt (rotating order), greedy, prefill included, the Session's default
128 new tokens: the pair with the distilled adapter, the pair with
the drafter unadapted (each a Session with its defaults on the same runtimes: the cost model
choosing k and copies, drafts stopping after a token the drafter gives < 0.5),
the target alone on the same runtime, llama.cpp alone on the target's GGUF and transformers'
assisted generation at its best setting. Before the timed runs, each pair drafts a fixed k on
the same prompts (untimed): the acceptance per draft position each adapter gets, which also
calibrates each session's cost model on its own adapter. With --gamma, the first version again
with its acceptance head deciding each draft's length (stop once the predicted chance of a
rejection passes gamma); with --priced, with the head ending each draft where the cost model
prices drafting on below its cost; with --confidence, the first version and the zero adapter each
stopping a draft after a token the drafter itself gives less than that probability (0: full
drafts). Every pair output is checked against the target alone's (lossless). Each ratio to the
zero adapter comes with a 95% paired bootstrap interval over the prompts.

  omnidraft distill --target qwen2.5-coder-1.5b && python scripts/bench_distill.py --target qwen2.5-coder-1.5b
Writes bench/results/distill-<stamp>.{json,md}.
"""

from __future__ import annotations

import sys
import textwrap
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    from omnidraft.device.threads import configure_process

    configure_process()
    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, k=False, max_new_tokens=128, target="qwen2.5-coder-1.5b")
    ap.add_argument("--version", nargs="+", default=None, help="the distilled adapter versions, each a row "
                    "(default: the pair's latest; the first named is the one the ratio columns compare)")
    ap.add_argument("--gamma", type=float, nargs="+", default=[], help="rows with the first version's acceptance "
                    "head deciding each draft's length at these thresholds")
    ap.add_argument("--priced", action="store_true", help="a row with the first version's acceptance head "
                    "ending each draft where the cost model prices drafting on below its cost")
    ap.add_argument("--confidence", type=float, nargs="+", default=[], help="rows with the first version and the "
                    "zero adapter each stopping a draft after a token the drafter gives less than this probability "
                    "(0: full drafts)")
    ap.add_argument("--code", type=int, default=16)
    ap.add_argument("--chat", type=int, default=10)
    ap.add_argument("--sharegpt", type=int, default=10, help="held-out ShareGPT first turns (a second chat set)")
    ap.add_argument("--probe-k", type=int, default=5, help="the fixed draft length of the per-position pass")
    ap.add_argument("--target-runtime", default="executorch", help="the target's runtime for every pair row")
    ap.add_argument("--no-transformers", action="store_true", help="skip transformers' assisted generation")
    args = ap.parse_args()
    for flag, values in (("gamma", args.gamma), ("confidence", [c for c in args.confidence if c])):
        if any(not 0.0 < v < 1.0 for v in values):
            ap.error(f"--{flag} must be in (0, 1), got {' '.join(map(str, values))}")
    for flag in ("code", "chat", "sharegpt"):
        if getattr(args, flag) < 0:
            ap.error(f"--{flag} must be >= 0, got {getattr(args, flag)}")
    if args.code + args.chat + args.sharegpt == 0:
        ap.error("no prompts: give --code, --chat or --sharegpt a count above 0")
    benchsetup.start(args.threads)
    log = benchsetup.logger("distill")

    from baselines import BEST, assisted_name, baselines
    from omnidraft import Runtime, Session, SpecConfig
    from omnidraft.decode.generate import generate_ar
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.lm import same_start
    from omnidraft.device.cpu import cpu_info
    from omnidraft.pairs.spec import adapter_store, pair_name
    from omnidraft.train.corpus import heldout, heldout_sharegpt

    name = pair_name(args.drafter, args.target)
    versions = args.version or [adapter_store().latest(name)]
    version = versions[0]
    metas = {m["version"]: m for m in adapter_store().list(name)}
    meta = metas.get(version, {})
    runtime = Runtime(target=args.target_runtime)
    distilled, zero = f"pair, distilled ({version})", "pair, zero adapter"
    sessions = {f"pair, distilled ({v})": Session(args.drafter, args.target, adapter=v, runtime=runtime, log=False)
                for v in versions}
    for g in args.gamma:
        sessions[f"{distilled}, head gamma {g}"] = Session(args.drafter, args.target, adapter=version,
                                                           spec=SpecConfig(gamma=g), runtime=runtime, log=False)
    if args.priced:
        sessions[f"{distilled}, head priced"] = Session(args.drafter, args.target, adapter=version,
                                                        spec=SpecConfig(priced=True), runtime=runtime, log=False)
    sessions[zero] = Session(args.drafter, args.target, adapter="none", runtime=runtime, log=False)
    confident = {}  # a stopping rule -> (its distilled row, its zero-adapter row)
    for c in args.confidence:
        rule = f"drafter confidence {c}" if c else "full drafts"
        confident[c] = (f"{distilled}, {rule}", f"{zero}, {rule}")
        for row, adapter in zip(confident[c], (version, "none")):
            sessions[row] = Session(args.drafter, args.target, adapter=adapter, spec=SpecConfig(confidence=c or None),
                                    runtime=runtime, log=False)
    first = sessions[distilled]
    alone_row = f"target alone ({first.target_runtime})"
    runs = baselines(args.target, args.drafter, args.threads, log, assisted=() if args.no_transformers else (BEST,))
    held = heldout(args.code, args.chat)  # at most the held-out sets: never a corpus prompt
    sets = {"code": [(p, False) for p, chat in held if not chat], "chat": [(p, True) for p, chat in held if chat],
            "sharegpt": [(p, True) for p in heldout_sharegpt(args.sharegpt)]}
    sets = {n: prompts for n, prompts in sets.items() if prompts}
    models = [m for s in sessions.values() for m in (s.target_model, s.drafter)]

    positions = {row: defaultdict(lambda: [0, 0]) for row in sessions}  # position -> [reached, accepted]
    for set_name, prompts in sets.items():
        for i, (prompt, chat) in enumerate(prompts):
            log(f"fixed k = {args.probe_k}: {set_name} {i + 1}/{len(prompts)}")
            for row, s in sessions.items():
                s.new_conversation()
                with s.draft_length.fixed(args.probe_k):
                    m = s.generate(prompt, max_new_tokens=args.max_new_tokens, chat=chat).metrics
                for p, (n, a) in enumerate(zip(m["position_reached"], m["position_accepted"])):
                    positions[row][(set_name, p)][0] += n
                    positions[row][(set_name, p)][1] += a

    rows = list(sessions) + [alone_row] + list(runs)
    tally = {s: {r: benchio.Tally() for r in rows} for s in sets}
    forwards, lossless, chosen = defaultdict(int), defaultdict(int), defaultdict(list)
    for set_name, prompts in sets.items():
        for i, (prompt, chat) in enumerate(prompts):
            log(f"timed: {set_name} {i + 1}/{len(prompts)}")
            ids = encode_prompt(first.target_tok, prompt, chat=chat)
            again = same_start(*models)
            order = rows[i % len(rows):] + rows[: i % len(rows)]
            outputs = {}
            for row in order:
                again()
                if row in sessions:
                    s = sessions[row]
                    s.new_conversation()
                    got = s.generate(prompt, max_new_tokens=args.max_new_tokens, chat=chat)
                    outputs[row] = got.token_ids
                    forwards[(set_name, row)] += got.metrics["target_forwards"]
                    chosen[(set_name, row)].append(s.draft_length.state().get("k"))
                elif row == alone_row:
                    got = generate_ar(first.target, first.target_tok, prompt, max_new_tokens=args.max_new_tokens,
                                      chat=chat)
                    outputs[row] = got.token_ids
                else:
                    n, secs = runs[row](ids, args.max_new_tokens)
                    tally[set_name][row].add({"new_tokens": n, "wall_s": secs, "proposed": 0, "accepted": 0,
                                              "steps": n, "ngram_proposed": 0})
                    continue
                tally[set_name][row].add(benchio.filled(got.metrics))
            for row in sessions:
                lossless[row] += outputs[row] == outputs[alone_row]

    cpu = cpu_info()
    cpu_line = benchio.cpu_line(cpu, args.threads)
    # 95% paired bootstrap intervals of each compared pair of rows' tokens/s ratio, per set
    intervals = {(n, a, b): benchio.ratio_interval(tally[n][a], tally[n][b])
                 for n in sets for a, b in [(distilled, zero), *confident.values()]}
    header = ["set"] + rows + [f"{version} / zero adapter (95% interval)", f"{version} / target alone",
                               f"{version} / llama.cpp alone",
                               f"tokens per target forward ({'; '.join(r.removeprefix('pair, ') for r in sessions)})",
                               "forwards ratio"]
    table = []
    for set_name in sets:
        t = tally[set_name]
        tps = {r: t[r].tokens_per_s() for r in rows}
        per_fwd = {r: t[r].tokens / max(forwards[(set_name, r)], 1) for r in sessions}
        llama = tps.get("llama.cpp target alone")
        table.append([set_name] + [tps[r] for r in rows] + [
            f"{tps[distilled] / tps[zero]:.2f}x ({span(intervals[set_name, distilled, zero])})",
            f"{tps[distilled] / tps[alone_row]:.2f}x",
            f"{tps[distilled] / llama:.2f}x" if llama else "",
            ", ".join(f"{per_fwd[r]:.2f}" for r in sessions),
            ", ".join(f"{per_fwd[r] / per_fwd[zero]:.2f}x" for r in sessions if r != zero)])
    same_rule = [f"{set_name}, {a.removeprefix(distilled + ', ')}: {version} / zero adapter "
                 f"{tally[set_name][a].tokens_per_s() / tally[set_name][b].tokens_per_s():.2f}x "
                 f"({span(intervals[set_name, a, b])})"
                 for set_name in sets for a, b in confident.values()]
    pos_rows = []
    for set_name in sets:
        for row in sessions:
            cells = [positions[row][(set_name, p)] for p in range(args.probe_k)]
            pos_rows.append([set_name, row] + [f"{a / n:.3f} ({n})" if n else "" for n, a in cells])
    n_prompts = sum(len(p) for p in sets.values())
    report = benchio.stamp_report(drafter=args.drafter, target=args.target, cpu=cpu, threads=args.threads,
                                  max_new_tokens=args.max_new_tokens, version=version, adapter_meta=meta,
                                  versions_compared={v: metas.get(v, {}) for v in versions[1:]},
                                  target_runtime=first.target_runtime, drafter_runtime=first.drafter_runtime,
                                  tokens_per_s={n: {r: tally[n][r].tokens_per_s() for r in rows} for n in sets},
                                  ratio_interval_95={" / ".join(key): v for key, v in intervals.items()},
                                  per_prompt={n: {r: tally[n][r].per_prompt for r in rows} for n in sets},
                                  tokens_per_forward={f"{n} / {r}": tally[n][r].tokens / max(forwards[(n, r)], 1)
                                                      for n in sets for r in sessions},
                                  k_chosen={f"{n} / {r}": v for (n, r), v in chosen.items()},
                                  position_acceptance={r: {f"{n} / {p}": v for (n, p), v in d.items()}
                                                       for r, d in positions.items()},
                                  identical_to_target_alone={r: f"{lossless[r]}/{n_prompts}" for r in sessions})
    md = [f"{args.drafter} -> {args.target}, greedy, {args.max_new_tokens} new tokens, prefill included, interleaved "
          f"per prompt (rotating order); target on {first.target_runtime}, drafter on {first.drafter_runtime}. "
          f"CPU: {cpu_line}.", "", "Tokens/s:", "", *benchio.table(header, table), "",
          *([("With the same stopping rule on both: " + "; ".join(same_rule) + "."), ""] if same_rule else []),
          f"Acceptance per draft position at k = {args.probe_k} (accepted / reached, reached in brackets), the same "
          "prompts, untimed:", "", *benchio.table(["set", "pair"] + [f"position {p + 1}" for p in range(args.probe_k)],
                                                   pos_rows), "",
          "Outputs identical to the target alone's: " + ", ".join(f"{r} {lossless[r]}/{n_prompts}" for r in sessions)
          + ".", "", f"transformers row: {assisted_name(BEST)}." if not args.no_transformers else "", "",
          *[line for v in versions for line in distill_lines(metas.get(v, {}))]]
    stem = benchio.save(args.out, "distill", "A drafter aligned before the first prompt", report, md)
    plot_curve([metas.get(v, {}) for v in versions], stem, cpu_line)
    for s in sessions.values():
        s.close()
    return 0


def span(interval: tuple[float, float]) -> str:
    """An interval as a table cell."""
    return f"{interval[0]:.2f}-{interval[1]:.2f}"


def distill_lines(meta: dict) -> list[str]:
    """What the distillation behind the adapter cost and bought (its report, kept as the adapter's meta)."""
    if not meta.get("distilled"):
        return []
    wall_h = (meta.get("records", {}).get("seconds", 0) + meta.get("train_seconds", 0)) / 3600
    curve = ", ".join(f"{x}: {a:.3f}" for x, a in meta.get("curve", []))
    return [f"Distillation of {meta['version']}: {meta['corpus_records']} corpus records "
            f"({meta['corpus_target_positions']} target positions), {meta['updates']} record-steps, records + "
            f"training {wall_h:.2f} wall-hours; held-out "
            f"teacher-forced acceptance {meta['acceptance_before']} -> {meta['acceptance_after']}"
            + (f"; learning curve (record-steps: acceptance) {curve}" if curve else "") + "."]


def plot_curve(metas: list[dict], stem: Path, cpu_line: str) -> None:
    """Each distillation's learning curve (held-out acceptance against target positions trained on)
    as <stem>.png."""
    metas = [m for m in metas if len(m.get("curve", [])) >= 2]
    if not metas:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no curve", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for meta in metas:
        xs, ys = zip(*meta["curve"])
        per_step = meta["corpus_target_positions"] / max(meta["corpus_records"], 1)  # a record-step's positions
        ax.plot([x * per_step / 1000 for x in xs], ys, marker="o",
                label=f"{meta['version']}: {meta['corpus_records']} records, {meta['config']['epochs']} epochs")
    ax.axhline(metas[0]["curve"][0][1], linestyle=":", color="gray", label="zero adapter")
    ax.set_xlabel("thousand target positions trained on (epochs counted)")
    ax.set_ylabel("held-out teacher-forced greedy acceptance")
    ax.set_title(f"{metas[0]['pair']}: distillation learning curves\n" + "\n".join(textwrap.wrap(cpu_line, 100)),
                 fontsize=7)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=120)


if __name__ == "__main__":
    sys.exit(main())
