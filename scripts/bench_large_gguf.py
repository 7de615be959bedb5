"""What drafting buys where the drafter costs a few percent of the target (#53): a GGUF shaped like
Qwen2.5-7B (28 layers, hidden 3584, random Q4_0 weights written by export/gguf_write.py under
$OMNIDRAFT_HOME/bench-gguf, generated here, never committed; the packaged Qwen2.5 tokenizer),
timed on llama.cpp at each verify width on this CPU, and the pair's decoding speed the cost model
PREDICTS from those costs, the drafter's cost and the acceptance per draft position an earlier
`omnidraft pair` measured (its pairs/<pair>/cost*.json). A prediction, not a measurement: random
weights accept nothing.

  omnidraft pair --target qwen2.5-coder-1.5b && python scripts/bench_large_gguf.py --pair smollm2-135m--qwen2.5-coder-1.5b
Writes bench/results/large-gguf-<stamp>.{json,md}.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = {"7b": dict(hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4, vocab=151936),
          "3b": dict(hidden=2048, intermediate=11008, layers=36, heads=16, kv_heads=2, vocab=151936)}


def main() -> int:
    from omnidraft.device.threads import configure_process

    configure_process()
    import json
    import time

    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, target=None, k=False)
    ap.add_argument("--shape", choices=SHAPES, default="7b")
    ap.add_argument("--pair", default="smollm2-135m--qwen2.5-coder-1.5b", help="the pair whose acceptance and "
                    "drafter cost the prediction uses (its cost model file)")
    ap.add_argument("--widths", default="1,2,3,4,5,8,9,16")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    benchsetup.start(args.threads)
    log = benchsetup.logger("large-gguf")

    from omnidraft.device.llamacpp import LlamaCppLM
    from omnidraft.export.gguf_write import Shape, write_random_q4_0
    from omnidraft.home import subdir
    from omnidraft.models import catalog
    from omnidraft.device.cpu import cpu_info
    from omnidraft.pairs.cost import CostModel
    from omnidraft.pairs.timing import measure
    from omnidraft.pairs.spec import pair_dir

    shape = Shape(**SHAPES[args.shape])
    gguf = subdir("bench-gguf") / f"qwen2-{args.shape}-shape-random-q4_0.gguf"
    if not gguf.is_file():
        log(f"writing {gguf} (random Q4_0 weights) ...")
        t0 = time.perf_counter()
        part = gguf.with_suffix(".partial")
        write_random_q4_0(shape, catalog.ensure_gguf("qwen2.5-coder-0.5b", progress=log), part)
        part.rename(gguf)
        log(f"written in {time.perf_counter() - t0:.0f} s, {gguf.stat().st_size / 2**30:.2f} GiB")
    t0 = time.perf_counter()
    lm = LlamaCppLM(gguf, n_ctx=512, threads=args.threads, name=f"{args.shape}-shaped")
    load_s = time.perf_counter() - t0
    widths = tuple(int(w) for w in args.widths.split(","))
    timed = measure(lm, None, widths, reps=args.reps, progress=log)

    kept = [p for p in (pair_dir(args.pair) / "cost.json", pair_dir(args.pair) / "cost-llamacpp.json") if p.is_file()]
    if not kept:
        raise SystemExit(f"no cost model kept for {args.pair}: run `omnidraft pair` first")
    saved = json.loads(kept[0].read_text())
    counts = [a / n for a, n in zip(saved["accepted"], saved["reached"]) if n > 0]
    drafter = saved["model"]
    model = CostModel(verify_ms=timed.verify_ms, drafter_ms=drafter["drafter_ms"],
                      translate_ms=drafter.get("translate_ms", 0.0), catchup_ms=drafter.get("catchup_ms", 0.0))
    alone = model.tokens_per_s(counts, 0)
    by_k = {k: round(model.tokens_per_s(counts, k), 3) for k in range(1, 9)}
    k, best = model.choose(counts)
    cpu = cpu_info()
    report = benchio.stamp_report(shape=SHAPES[args.shape], gguf_gib=round(gguf.stat().st_size / 2**30, 3),
                                  load_s=round(load_s, 2), cpu=cpu, verify_ms=timed.verify_ms,
                                  acceptance_from=str(kept[0]), position_acceptance=[round(a, 4) for a in counts],
                                  drafter_ms=drafter["drafter_ms"], predicted_alone_tokens_per_s=round(alone, 3),
                                  predicted_tokens_per_s_by_k=by_k, chosen_k=k, predicted_tokens_per_s=round(best, 3))
    v1 = timed.verify_ms[1]
    md = [f"A {args.shape}-shaped Qwen2 GGUF ({report['gguf_gib']} GiB, random Q4_0 weights) on llama.cpp; "
          f"CPU: {cpu['model']}, {cpu['cores']} cores, {' '.join(cpu['flags'])}, {args.threads} threads. Loaded in "
          f"{load_s:.1f} s.", "",
          *benchio.table(["width n", "ms", "v(n) = ms / one token"],
                         [[w, round(ms, 1), f"{ms / v1:.2f}"] for w, ms in timed.verify_ms.items()]), "",
          f"**Predicted** (the cost model; not measured: random weights accept nothing), with the drafter at "
          f"{drafter['drafter_ms']:.1f} ms a token ({drafter['drafter_ms'] / v1:.1%} of this target's) and the "
          f"acceptance per draft position {[round(a, 2) for a in counts]} that `omnidraft pair` measured for "
          f"{args.pair} ({kept[0].name}): the target alone {alone:.2f} tokens/s; drafting k = {k}: {best:.2f} tokens/s "
          f"({best / alone:.2f}x). By k: " + ", ".join(f"{kk}: {v}" for kk, v in by_k.items()) + "."]
    benchio.save(args.out, "large-gguf", f"A {args.shape}-shaped GGUF on llama.cpp: what drafting would buy",
                 report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
