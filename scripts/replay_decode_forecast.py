"""How well routing forecasts a generation's decoding (#53), replayed on what the product's routed
generations measured in every bench/results/llamacpp-*.json: each generation's tokens and decoding
seconds are fed, in the order they ran, to the cost model's own ``observe_decode``, and its time
is forecast first from the runtime's scale over every generation (``CostModel.decode_scale``, the
forecast before kinds of work were told apart) and from its kind of work's scale
(``decode_scale_for``: a completion, a chat turn, a long chat turn; pairs/routing.py ``kind``).
Pass 1 starts from a fresh cost model, as each bench did right after `omnidraft pair`; pass 2 runs
the same generations again on what pass 1 learnt (a pair that has done such work before).

The drafts-only prediction each forecast scales is the row's ``drafts_tokens_per_s`` where the
bench recorded it, else the runtime's first forecast in that run (made at scale 1: pairing writes a
fresh cost model); a row's kind is its recorded ``work``, else its set's (code prompts are
completions, chat prompts 13-18 ids past the chat preamble, copy-heavy turns 54-165). The prompt
read is the forecast recorded; only decoding is replayed. No model runs: seconds.

  python scripts/replay_decode_forecast.py
Writes bench/results/decode-forecast-<stamp>.{json,md}.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SET_KIND = {"code": "completion", "chat": "chat", "copy-heavy": "chat, long turn"}


def replay(runs: list[dict]) -> dict[str, dict[str, list[float]]]:
    """{set: {"route 1", "kind 1", "route 2", "kind 2": [predicted ms, measured ms]}} over one
    bench run's routed generations (``runs``: (set, row) in the order they ran)."""
    from omnidraft.pairs.cost import CostModel

    first = {}
    for _, row in runs:
        first.setdefault(row["runtime"], row["decode_tokens_per_s"][0])
    models = {rt: CostModel({1: 1.0}, drafter_ms=0.0) for rt in first}
    sums: dict[str, dict[str, list[float]]] = {}
    for n in (1, 2):
        for name, row in runs:
            m = models[row["runtime"]]
            drafts = row.get("drafts_tokens_per_s", first[row["runtime"]])
            work = row.get("work", SET_KIND[name])
            tokens, (prefill_ms, measured_prefill) = row["tokens"], row["prefill_ms"]
            measured_ms = row["ms"][1]
            decode_s = (measured_ms - measured_prefill) / 1e3
            for how, scale in (("route", m.decode_scale), ("kind", m.decode_scale_for(work))):
                got = sums.setdefault(name, {}).setdefault(f"{how} {n}", [0.0, 0.0])
                got[0] += prefill_ms + tokens * 1e3 * scale / drafts
                got[1] += measured_ms
            m.observe_decode(drafts, tokens, decode_s, work)
    return sums


def main() -> int:
    import benchio

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="bench/results", help="where the llamacpp-*.json runs are")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    rows, report_runs = [], []
    for path in sorted(glob.glob(f"{args.results}/llamacpp-*.json")):
        data = json.loads(Path(path).read_text())
        if not data.get("forecasts"):
            continue  # runs before routing forecasts were recorded
        runs = [(name, r) for name in SET_KIND for r in data["forecasts"].get(name, [])]
        sums = replay(runs)
        errors = {name: {how: round(ms[1] / ms[0] - 1, 3) for how, ms in s.items()} for name, s in sums.items()}
        cpu = "AVX-512" if any(f.startswith("avx512") for f in data["cpu"]["flags"]) else "AVX2 only"
        report_runs.append({"run": Path(path).stem, "cpu": cpu, "generations": len(runs), "errors": errors})
        for name, e in errors.items():
            rows.append([Path(path).stem, cpu, name] + [f"{e[h]:+.0%}" for h in ("route 1", "kind 1", "route 2",
                                                                                 "kind 2")])
    worst = {}
    for r in report_runs:
        for name, e in r["errors"].items():
            for how, v in e.items():
                key = f"{r['cpu']} / {name} / {how}"
                worst[key] = max(worst.get(key, 0.0), abs(v))
    summary = [[key.rsplit(" / ", 1)[0], key.rsplit(" / ", 1)[1], f"{v:.0%}"] for key, v in sorted(worst.items())]
    report = benchio.stamp_report(runs=report_runs, worst_abs_error=worst)
    md = ["Routing's forecast of each routed generation (prompt read as forecast, decoding replayed) against what it "
          "took, summed per set: the generation time error (measured / predicted - 1). `route`: decoding forecast at "
          "the runtime's scale over every generation; `kind`: at the scale of its kind of work. Pass 1 from a fresh "
          "cost model, as the bench ran; pass 2 the same generations again on what pass 1 learnt.", "",
          *benchio.table(["run", "CPU", "set", "route, pass 1", "kind, pass 1", "route, pass 2", "kind, pass 2"], rows),
          "", "Largest |error| over the runs:", "",
          *benchio.table(["CPU / set", "forecast, pass", "largest |error|"], summary)]
    benchio.save(args.out, "decode-forecast", "Routing's decode forecast replayed", report, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
