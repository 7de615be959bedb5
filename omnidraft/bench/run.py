"""Running a suite: its rows on its prompts, interleaved with rotation (measure/interleave.py),
tallied per prompt set and overall (measure/tally.py), with each row's tokens/s against the
reference row's on the same prompts (a paired 95% interval) and its output equal to the
reference's counted; stamped (measure/stamp.py), written and compared with the last comparable
run (measure/report.py). A suite whose rows do not fit memory at once runs in phases, each with
the reference; one that samples runs its prompts again sampled on the rows that sample. A row
that cannot run here is named in the result with why.

Knows suites and the measure package; nothing about what a row runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from omnidraft.bench.prompts import prompt_sets
from omnidraft.bench.rows import Missing, Prompt, Run
from omnidraft.bench.suites import Options, Suite
from omnidraft.errors import OmniDraftError
from omnidraft.generating import generating
from omnidraft.measure import report
from omnidraft.measure.interleave import interleaved
from omnidraft.measure.stamp import stamp
from omnidraft.measure.tally import Tally, ratio_interval
from omnidraft.models.budget import release


def run_suite(suite: Suite, opts: Options, *, out: str | Path = "bench/results", keep: bool = True,
              log: Callable[[str], None] = lambda s: None) -> dict:
    """Run ``suite`` with ``opts``; returns the result (also written under ``out``). Each phase's
    rows are built, run greedy (then sampled, where the suite samples) and closed before the next's."""
    from omnidraft.device.threads import set_threads

    set_threads(opts.threads)
    opts = suite.options(opts)
    stamped = stamp(suite.name, opts.threads, question=suite.question, options=opts.as_json())  # the code as it starts
    prompts = prompt_sets(opts.counts)
    phases = list(opts.phases) or (list(suite.phases) if suite.phases and not opts.rows else [opts.rows])
    parts: list[Part] = []
    extra: dict = {"missing": {}, "states": {}, "concurrent": {}}

    def written() -> dict:
        result = {**stamped, **_merged(parts), **{k: v for k, v in extra.items() if v}}
        report.write(out, f"bench-{suite.name}", f"omnidraft bench {suite.name}", result, _markdown(result), keep=keep)
        return result

    try:
        _phases(suite, opts, phases, prompts, parts, extra, log)
    except BaseException as err:  # a later phase failed (a server died) or was interrupted: the finished kept
        if parts:
            extra["incomplete"] = f"phase {len({p.phase for p in parts}) + 1} of {len(phases)} did not finish: " \
                                  f"{type(err).__name__}: {err}"
            written()
            log(f"the finished phases are written; {extra['incomplete']}")
        raise
    return written()


def _phases(suite: Suite, opts: Options, phases: list, prompts: list[Prompt], parts: list, extra: dict, log) -> None:
    """Each phase built, run and closed in turn, its parts appended to ``parts`` as they finish."""
    with generating():  # the fine-tuning daemon trains nothing under the clock (generating.py)
        for n, keys in enumerate(phases, 1):
            built, rows = suite.build(replace(opts, rows=keys, phases=()), log), {}  # key -> Row (or Missing)
            try:
                rows = {k: r for k, r in built.items() if not isinstance(r, Missing)}
                extra["missing"].update({r.name: r.why for r in built.values() if isinstance(r, Missing)})
                if n == 1:
                    prompts = _answered(suite, rows, prompts, opts.max_new_tokens, log)
                taken = {name for part in parts for name in part.tallies}
                for sampling in (None, suite.sampled) if suite.sampled else (None,):
                    parts.append(_part(n, rows, suite.reference_in(rows), prompts, sampling, taken, opts.max_new_tokens,
                                       log))
                if opts.clients:  # the serve suite's second phase
                    from omnidraft.bench.concurrent import run_concurrently
                    from omnidraft.bench.servers import ServerRow

                    # an in-process row serves one caller
                    servers = [r for r in rows.values() if isinstance(r, ServerRow)]
                    extra["concurrent"].update(run_concurrently(servers, prompts, opts.clients, opts.max_new_tokens,
                                                                log))
            finally:
                for row in reversed(built.values()):  # the last built first (a row may share an earlier one's Session)
                    getattr(row, "close", lambda: None)()
                extra["states"].update({r.name: r.state for r in built.values() if getattr(r, "state", None)})
                del built, rows  # this phase's models freed before the next phase loads its own
                release()


def _answered(suite: Suite, rows: dict, prompts: list[Prompt], max_new_tokens: int, log) -> list[Prompt]:
    """``prompts`` with the follow-ups' earlier turns answered by the reference row (the same text for every row)."""
    if not any(p.earlier for p in prompts):
        return prompts
    if suite.reference not in rows or not hasattr(rows[suite.reference], "answer"):
        raise OmniDraftError("follow-up turns need the target alone's answers", f"keep the {suite.reference} row")
    log("answering the follow-ups' earlier turns with the target alone ...")
    return [rows[suite.reference].answer(p, max_new_tokens) if p.earlier else p for p in prompts]


@dataclass
class Part:
    """One phase's rows over the prompts in one mode: each row's tally by group (``all``, each
    set, each turn where follow-ups ran) under its name in the result (``, sampled`` for the
    sampled mode; `` (phase N)`` where an earlier phase has the name: the reference), and the
    runtime each of its generations ran on."""

    phase: int
    mode: str
    reference: str | None
    tallies: dict[str, dict[str, Tally]] = field(default_factory=dict)  # name -> group -> tally
    routes: dict[str, list[str]] = field(default_factory=dict)  # name -> runtime per prompt, where reported


def _part(phase: int, rows: dict, reference: str, prompts: list[Prompt], sampling, taken: set, max_new_tokens: int,
          log) -> Part:
    mode = "greedy" if sampling is None else "sampled"
    here = [r for r in rows.values() if sampling is None or r.samples]
    names = {}
    for r in here:
        name = r.name + ("" if sampling is None else ", sampled")
        names[id(r)] = name if name not in taken else f"{name} (phase {phase})"
    ref = names.get(id(rows[reference])) if reference in rows else None
    prompts = prompts if sampling is None else [replace(p, sampling=sampling) for p in prompts]
    runs: dict[tuple[int, str], Run] = {}
    for i, prompt, row, got in interleaved(prompts, here, lambda r, p: r.run(p, max_new_tokens)):
        runs[i, names[id(row)]] = got
        log(f"{mode} {prompt.set} {i + 1}/{len(prompts)} {names[id(row)]}: "
            f"{got.tokens / max(got.seconds, 1e-9):.1f} tokens/s")
    groups = {"all": range(len(prompts))} | {s: [i for i, p in enumerate(prompts) if p.set == s]
                                             for s in dict.fromkeys(p.set for p in prompts)}
    if any(p.earlier for p in prompts):  # where follow-ups ran: by turn too
        groups |= {f"turn {t}": [i for i, p in enumerate(prompts) if len(p.earlier) + 1 == t]
                   for t in sorted({len(p.earlier) + 1 for p in prompts})}
    part = Part(phase, mode, ref)
    for name in names.values():
        part.tallies[name] = {g: _tally(idx, name, runs, ref if sampling is None else None) for g, idx in groups.items()}
        routes = [runs[i, name].figures.get("runtime") for i in range(len(prompts))]
        if any(routes):
            part.routes[name] = routes
    return part


def _merged(parts: list[Part]) -> dict:
    """The result's rows, sets and turns (each row's summary against its part's reference), the
    runtimes each row's generations ran on, and the parts where there is more than one."""
    out: dict = {"reference": parts[0].reference, "runtimes": {}, "routes": {}, "rows": {}, "sets": {}, "turns": {}}
    for part in parts:
        for name, groups in part.tallies.items():
            for g, t in groups.items():
                ref = part.tallies[part.reference][g] if part.reference else None
                summary = _summary(t, ref, name != part.reference)
                if g == "all":
                    out["rows"][name] = summary
                else:
                    out["turns" if g.startswith("turn ") else "sets"].setdefault(g, {})[name] = summary
        for name, routes in part.routes.items():
            out["routes"][name] = routes
            out["runtimes"][name] = {rt: routes.count(rt) for rt in sorted(set(routes))}
    if len(parts) > 1:
        out["parts"] = [{"phase": p.phase, "mode": p.mode, "reference": p.reference, "rows": list(p.tallies)}
                        for p in parts]
    return out


def _tally(idx, name: str, runs: dict, reference: str | None) -> Tally:
    """The row ``name``'s tally over the prompts ``idx``. Its output is compared with the
    reference's where both report ids and, for a routed product, where its generation ran on the
    reference's runtime (on llama.cpp the pair is exact with respect to llama.cpp's logits, not the
    program's); ``reference`` None: not compared (a sampled pass)."""
    t = Tally()
    for i in idx:
        got = runs[i, name]
        ref = runs.get((i, reference)) if reference else None
        compared = (got.ids is not None and ref is not None and ref.ids is not None and name != reference
                    and got.figures.get("runtime") in (None, ref.figures.get("runtime")))
        got.into(t, equal=got.ids == ref.ids if compared else None)
    return t


def _summary(t: Tally, ref: Tally | None, against: bool) -> dict:
    out = t.summary()
    if ref is not None and against and t.prompts:
        out["vs_reference"] = round(t.tokens_per_s() / max(ref.tokens_per_s(), 1e-9), 3)
        out["vs_reference_95"] = [round(x, 3) for x in ratio_interval(t, ref)] if t.prompts > 1 else None
    return out


def _markdown(result: dict) -> list[str]:
    ref, parts = result["reference"], result.get("parts")
    lines = [result["question"], "",
             f"Rows interleaved per prompt with rotation; ratios to {ref or 'none'} on the same prompts (paired "
             f"95% bootstrap interval); greedy output equal to {ref or 'none'}'s counted where a row reports its "
             "ids (llama.cpp's rows do not) and, for the product, where its generation ran on the same runtime; "
             "target forwards where a row counts them (other engines' drafting rows do not).", ""]
    if result.get("incomplete"):
        lines += [f"**Incomplete**: {result['incomplete']}; the phases before it are as measured.", ""]
    if parts:
        lines += [f"{len({p['phase'] for p in parts})} phase(s), each built, run and closed in turn, greedy"
                  + (" then sampled" if any(p["mode"] == "sampled" for p in parts) else "") + "; each row's ratio is "
                  "to the reference of its own phase and mode: " + "; ".join(
                      f"phase {p['phase']} {p['mode']}: {p['reference'] or 'none'}" for p in parts) + ".", ""]
    phase = {name: p["phase"] for p in parts or () for name in p["rows"]}
    cells, served = [], any(s.get("first_token_s") is not None for s in result["rows"].values())
    by_position = any(s.get("accepted_by_position") for s in result["rows"].values())
    recalls = any(s.get("recalled") for s in result["rows"].values())
    for group, rows in [("all", result["rows"]), *result["sets"].items(), *result.get("turns", {}).items()]:
        for name, s in rows.items():
            ratio = "-" if "vs_reference" not in s else f"{s['vs_reference']:.2f}x" + (
                f" [{s['vs_reference_95'][0]:.2f}, {s['vs_reference_95'][1]:.2f}]" if s.get("vs_reference_95") else "")
            acc = "-" if s["acceptance"] is None else f"{s['acceptance']:.3f} ({s['accepted']}/{s['drafted']})"
            equal = f"{s['equal']}/{s['compared']}" if s["compared"] else "-"
            per_forward = "-" if s["tokens_per_forward"] is None else s["tokens_per_forward"]
            cells.append(([phase[name]] if parts else []) + [group, name, s["prompts"], f"{s['tokens_per_s']:.2f}",
                                                              ratio, acc]
                         + ([" / ".join(str(n) for n in s["accepted_by_position"][:4])
                             if s.get("accepted_by_position") else "-"] if by_position else [])
                         + ([f"{s['recalls_kept']}/{s['recalled']}" if s.get("recalled") else "-"] if recalls else [])
                         + [per_forward, equal]
                         + ([f"{s['first_token_s']:.2f}" if s.get("first_token_s") is not None else "-",
                             f"{s['latency_p50_s']:.2f} / {s['latency_p95_s']:.2f}"] if served else []))
    routed = [f"{name}: " + ", ".join(f"{n} on {rt}" for rt, n in sorted(counts.items()))
              for name, counts in result["runtimes"].items() if not name.startswith("target alone")]
    if routed:
        lines += ["Generations by target runtime: " + "; ".join(routed) + ".", ""]
    lines += report.table((["phase"] if parts else []) + ["set", "row", "prompts", "tokens/s", "vs " + (ref or "-"),
                                                          "accepted / drafted"]
                          + (["accepted by draft position (1-4)"] if by_position else [])
                          + (["recalled from memory, kept / proposed"] if recalls else [])
                          + ["tokens per target forward", f"equal to {ref or '-'}"]
                          + (["first token (s, median)", "latency p50 / p95 (s)"] if served else []), cells)
    for name, state in result.get("states", {}).items():
        memory = state.get("memory") if isinstance(state, dict) else None
        if memory and memory.get("spaces"):
            space = memory["spaces"][0]
            lines += ["", f"{name}: {space['entries']} answers, {space['tokens']} tokens remembered "
                      f"({memory['charged_bytes'] / 2**20:.1f} MiB of its {memory['max_bytes'] / 2**20:.0f} MiB bound; "
                      f"{memory['file_bytes'] / 1e6:.1f} MB on disk with its write-ahead log, the index "
                      f"{state['index_bytes'] / 2**20:.1f} MiB in RAM); {state['lookups']} lookups, "
                      f"{state['lookup_ms_mean']:.3f} ms each on average."]
        elif isinstance(state, dict) and "lookups" in state:
            lines += ["", f"{name}: its index rebuilt from the file ({state['index_bytes'] / 2**20:.1f} MiB in RAM); "
                      f"{state['lookups']} lookups, {state['lookup_ms_mean']:.3f} ms each on average."]
    if result.get("missing"):
        lines += ["", "Not run here: " + "; ".join(f"{name}: {why}" for name, why in result["missing"].items()) + "."]
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
