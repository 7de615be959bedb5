"""Running a suite: its rows on its prompts, interleaved with rotation (measure/interleave.py),
tallied per prompt set and overall (measure/tally.py), with each row's tokens/s against the
reference row's on the same prompts (a paired 95% interval) and its output equal to the
reference's counted; stamped (measure/stamp.py), written and compared with the last comparable
run (measure/report.py).

Knows suites and the measure package; nothing about what a row runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from omnidraft.bench.prompts import prompt_sets
from omnidraft.bench.suites import Options, Suite
from omnidraft.errors import OmniDraftError
from omnidraft.measure import report
from omnidraft.measure.interleave import interleaved
from omnidraft.measure.stamp import stamp
from omnidraft.measure.tally import Tally, ratio_interval


def run_suite(suite: Suite, opts: Options, *, out: str | Path = "bench/results", keep: bool = True,
              log: Callable[[str], None] = lambda s: None) -> dict:
    """Run ``suite`` with ``opts``; returns the result (also written under ``out``)."""
    from omnidraft.device.threads import set_threads

    set_threads(opts.threads)
    opts = suite.options(opts)
    stamped = stamp(suite.name, opts.threads, question=suite.question, options=opts.as_json())  # the code as it starts
    prompts = prompt_sets(opts.counts)
    built = suite.build(opts, log)  # key -> Row
    try:
        return _run(suite, opts, stamped, prompts, built, out, keep, log)
    finally:
        for row in built.values():  # servers stop; Sessions and models go with the last reference
            getattr(row, "close", lambda: None)()


def _run(suite: Suite, opts: Options, stamped: dict, prompts: list, built: dict, out, keep: bool, log) -> dict:
    rows = list(built.values())
    names = {r.name: r for r in rows}
    reference = built[suite.reference].name if suite.reference in built else None
    if any(p.earlier for p in prompts):  # follow-ups: the earlier answers are the target alone's, for every row
        if reference is None or not hasattr(built[suite.reference], "answer"):
            raise OmniDraftError("follow-up turns need the target alone's answers", f"keep the {suite.reference} row")
        log("answering the follow-ups' earlier turns with the target alone ...")
        prompts = [built[suite.reference].answer(p, opts.max_new_tokens) if p.earlier else p for p in prompts]
    runs: dict[tuple[int, str], object] = {}
    for i, prompt, row, got in interleaved(prompts, rows, lambda r, p: r.run(p, opts.max_new_tokens)):
        runs[i, row.name] = got
        log(f"{prompt.set} {i + 1}/{len(prompts)} {row.name}: {got.tokens / max(got.seconds, 1e-9):.1f} tokens/s")
    groups = {"all": range(len(prompts))} | {s: [i for i, p in enumerate(prompts) if p.set == s]
                                             for s in dict.fromkeys(p.set for p in prompts)}
    by_set = {g: _tallies(idx, names, runs, reference) for g, idx in groups.items()}
    turns = {f"turn {t}": [i for i, p in enumerate(prompts) if len(p.earlier) + 1 == t]  # where follow-ups ran
             for t in sorted({len(p.earlier) + 1 for p in prompts})} if any(p.earlier for p in prompts) else {}
    by_turn = {g: _tallies(idx, names, runs, reference) for g, idx in turns.items()}
    runtimes: dict[str, dict[str, int]] = {}  # row -> how many of its generations ran on each target runtime
    routes: dict[str, list[str]] = {}  # row -> the runtime of each prompt's generation, in prompt order
    for (_, name), got in sorted(runs.items()):
        if got.figures.get("runtime"):
            counts = runtimes.setdefault(name, {})
            counts[got.figures["runtime"]] = counts.get(got.figures["runtime"], 0) + 1
            routes.setdefault(name, []).append(got.figures["runtime"])
    result = {**stamped, "reference": reference, "runtimes": runtimes, "routes": routes,
              "rows": {n: _summary(t, by_set["all"], reference, n) for n, t in by_set["all"].items()},
              "sets": {g: {n: _summary(t, ts, reference, n) for n, t in ts.items()} for g, ts in by_set.items()
                       if g != "all"},
              "turns": {g: {n: _summary(t, ts, reference, n) for n, t in ts.items()} for g, ts in by_turn.items()}}
    if opts.clients:  # the serve suite's second phase
        from omnidraft.bench.concurrent import run_concurrently
        from omnidraft.bench.servers import ServerRow

        servers = [r for r in rows if isinstance(r, ServerRow)]  # an in-process row serves one caller
        result["concurrent"] = run_concurrently(servers, prompts, opts.clients, opts.max_new_tokens, log)
    report.write(out, f"bench-{suite.name}", f"omnidraft bench {suite.name}", result, _markdown(result), keep=keep)
    return result


def _tallies(idx, names: dict, runs: dict, reference: str | None) -> dict[str, Tally]:
    """Each row's tally over the prompts ``idx``. A row's output is compared with the reference's
    where both report ids and, for a routed product, where its generation ran on the reference's
    runtime (on llama.cpp the pair is exact with respect to llama.cpp's logits, not the program's)."""
    out = {}
    for name in names:
        t = out[name] = Tally()
        for i in idx:
            got = runs[i, name]
            ref = runs.get((i, reference)) if reference else None
            compared = (got.ids is not None and ref is not None and ref.ids is not None and name != reference
                        and got.figures.get("runtime") in (None, ref.figures.get("runtime")))
            got.into(t, equal=got.ids == ref.ids if compared else None)
    return out


def _summary(t: Tally, tallies: dict[str, Tally], reference: str | None, name: str) -> dict:
    out = t.summary()
    if reference and name != reference and t.prompts:
        ref = tallies[reference]
        out["vs_reference"] = round(t.tokens_per_s() / max(ref.tokens_per_s(), 1e-9), 3)
        out["vs_reference_95"] = [round(x, 3) for x in ratio_interval(t, ref)] if t.prompts > 1 else None
    return out


def _markdown(result: dict) -> list[str]:
    ref = result["reference"]
    lines = [result["question"], "",
             f"Rows interleaved per prompt with rotation; ratios to {ref or 'none'} on the same prompts (paired "
             f"95% bootstrap interval); greedy output equal to {ref or 'none'}'s counted where a row reports its "
             "ids (llama.cpp's rows do not) and, for the product, where its generation ran on the same runtime; "
             "target forwards where a row counts them (other engines' drafting rows do not).", ""]
    cells, served = [], any(s.get("first_token_s") is not None for s in result["rows"].values())
    for group, rows in [("all", result["rows"]), *result["sets"].items(), *result.get("turns", {}).items()]:
        for name, s in rows.items():
            ratio = "-" if "vs_reference" not in s else f"{s['vs_reference']:.2f}x" + (
                f" [{s['vs_reference_95'][0]:.2f}, {s['vs_reference_95'][1]:.2f}]" if s.get("vs_reference_95") else "")
            acc = "-" if s["acceptance"] is None else f"{s['acceptance']:.3f} ({s['accepted']}/{s['drafted']})"
            equal = f"{s['equal']}/{s['compared']}" if s["compared"] else "-"
            per_forward = "-" if s["tokens_per_forward"] is None else s["tokens_per_forward"]
            cells.append([group, name, s["prompts"], f"{s['tokens_per_s']:.2f}", ratio, acc, per_forward, equal]
                         + ([f"{s['first_token_s']:.2f}" if s.get("first_token_s") is not None else "-",
                             f"{s['latency_p50_s']:.2f} / {s['latency_p95_s']:.2f}"] if served else []))
    routed = [f"{name}: " + ", ".join(f"{n} on {rt}" for rt, n in sorted(counts.items()))
              for name, counts in result["runtimes"].items() if not name.startswith("target alone")]
    if routed:
        lines += ["Generations by target runtime: " + "; ".join(routed) + ".", ""]
    lines += report.table(["set", "row", "prompts", "tokens/s", "vs " + (ref or "-"), "accepted / drafted",
                           "tokens per target forward", f"equal to {ref or '-'}"]
                          + (["first token (s, median)", "latency p50 / p95 (s)"] if served else []), cells)
    together = result.get("concurrent")
    if together:
        n = max(c["clients"] for c in together.values())
        lines += ["", f"{n} clients at once, each on conversations of its own, the rows one after the other:", ""]
        lines += report.table(["row", "requests", "aggregate tokens/s", "latency p50 / p95 (s)", "first token (s)",
                               "failed"],
                              [[name, c["requests"], c["aggregate_tokens_per_s"],
                                f"{c['latency_p50_s']} / {c['latency_p95_s']}", c["first_token_s"],
                                len(c["failed"]) or "-"] for name, c in together.items()])
    return lines
