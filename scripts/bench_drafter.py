"""Drafter programs side by side (#39): what one drafted token costs and what it earns.

For each drafter program folder given (today's program first, as the reference):
1. ms per drafted token: a one-token call after a prefill of each --contexts length (median of
   --calls calls, the best of --reps rounds; programs interleaved round by round);
2. tokens per target forward at a fixed draft length --k on code and chat prompts against the
   target program (greedy; every pair's output must equal the target's own, token for token),
   the prompts interleaved: the target alone, then each drafter.
The last column of the table is the drafter's cost relative to the first program's, and its
tokens per target forward relative to the first's (the issue's bars: <= 1/3 and >= 90%).

  python scripts/bench_drafter.py $OMNIDRAFT_HOME/programs/smollm2-135m-8da8w-s1024 <other program> \
      --target qwen2.5-coder-1.5b --code 5 --chat 5
Writes bench/results/drafter-<stamp>.{json,md}.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, dtype="--dtype", k=False, max_new_tokens=64)
    ap.add_argument("programs", nargs="+", help="drafter program folders (the first is the reference)")
    ap.add_argument("--quant", default="8da8w", help="the target program's scheme")
    ap.add_argument("--k", type=int, default=3, help="the fixed draft length")
    ap.add_argument("--code", type=int, default=5)
    ap.add_argument("--chat", type=int, default=5)
    ap.add_argument("--contexts", default="100,400", help="cached tokens before the timed one-token calls")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--adapter", default=None, help="a published adapter version folder every program "
                    "runs with (default: each program's zero adapter)")
    args = ap.parse_args()
    benchsetup.start(args.threads)
    log = benchsetup.logger("drafter")
    from omnidraft.measure.tally import Tally
    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_ar, generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.build import local_target
    from omnidraft.device.cpu import cpu_info
    from omnidraft.propose.config import SpecConfig
    from omnidraft.errors import OmniDraftError
    from omnidraft.export.adapter_data import export_adapter
    from omnidraft.translate.state import PairState

    names = args.programs  # as given: two folders may share a name
    try:
        drafters = [ExecuTorchLM(Path(p), name=args.drafter) for p in args.programs]
        ptds = tempfile.TemporaryDirectory(prefix="bench-drafter-")  # removed when main returns
        if args.adapter:
            for i, d in enumerate(drafters):
                d.load_adapter(export_adapter(Path(args.adapter), d.info, Path(ptds.name) / f"{i}.ptd"))
    except OmniDraftError as err:
        print(f"bench_drafter: {err}", file=sys.stderr)
        return 2
    ms = token_ms(drafters, names, [int(c) for c in args.contexts.split(",")], args.calls, args.reps)
    log(f"ms per drafted token: {ms}")

    target = LocalTarget(local_target(args.target, "executorch", quant=args.quant))  # greedy
    dtok, ttok = load_tokenizer(args.drafter), load_tokenizer(args.target)
    sets = {n: p for n, p in (("code", benchsetup.prompt_mix(args.code, 0)),
                              ("chat", benchsetup.prompt_mix(0, args.chat))) if p}  # a set of 0 prompts: none
    rows = []
    for set_name, prompts in sets.items():
        tallies = {n: Tally() for n in names}
        for i, (p, chat) in enumerate(prompts):
            ref = generate_ar(target, ttok, p, max_new_tokens=args.max_new_tokens, chat=chat)
            for n, d in zip(names, drafters):
                pair = PairState(dtok, ttok, d.vocab_size, target.vocab_size)  # a fresh n-gram cache each
                got = generate_speculative(d, target, pair, p, cfg=SpecConfig("omnidraft"), k=FixedK(args.k),
                                           max_new_tokens=args.max_new_tokens, chat=chat)
                tallies[n].add_metrics(got.metrics, equal=got.token_ids == ref.token_ids)
            log(f"{set_name} {i + 1}/{len(prompts)}")
        for n in names:
            t = tallies[n]
            rows.append({"set": set_name, "prompts": len(prompts), "program": n,
                         "tokens_per_target_forward": round(t.tokens / max(t.forwards, 1), 3),
                         "acceptance": round(t.acceptance() or 0.0, 4), "equal_to_alone": t.equal})
    ref_name = names[0]
    for r in rows:
        base = next(x for x in rows if x["set"] == r["set"] and x["program"] == ref_name)
        r["forward_vs_reference"] = round(r["tokens_per_target_forward"] / base["tokens_per_target_forward"], 3)
    report = benchio.stamp_report(cpu=cpu_info(), k=args.k, target=args.target, target_quant=args.quant,
                                  adapter=args.adapter,
                                  programs=args.programs, ms_per_token=ms, rows=rows)
    ctxs = list(next(iter(ms.values())))
    md = [f"Drafter {args.drafter} programs; target {args.target} (ExecuTorch {args.quant}); greedy, "
          f"{args.max_new_tokens} new tokens, k = {args.k}; adapter {args.adapter or 'zero'}.", "",
          "ms per drafted token (one-token call after a prefill of that many tokens; median of "
          f"{args.calls} calls, best of {args.reps} interleaved rounds):", ""]
    md += benchio.table(["program", *[f"{c} cached" for c in ctxs], f"vs {ref_name}"],
                        [[n, *[ms[n][c] for c in ctxs],
                          " / ".join(f"{ms[n][c] / ms[ref_name][c]:.2f}" for c in ctxs)] for n in names])
    md += ["", f"Tokens per target forward at k = {args.k}:", ""]
    md += benchio.table(["prompts", "program", "tokens / target forward", f"vs {ref_name}", "acceptance",
                         "output == alone"],
                        [[f"{r['set']} ({r['prompts']})", r["program"], r["tokens_per_target_forward"],
                          f"{r['forward_vs_reference']:.2f}", r["acceptance"], f"{r['equal_to_alone']}/{r['prompts']}"]
                         for r in rows])
    benchio.save(args.out, "drafter", "Drafter programs side by side", report, md)
    return 0


def token_ms(drafters, names: list[str], contexts: list[int], calls: int, reps: int) -> dict:
    """name -> {context: ms of a one-token call}, the best of ``reps`` interleaved rounds."""
    ids = list(range(1000, 1000 + max(contexts) + 1))
    best: dict[str, dict[int, float]] = {n: {} for n in names}
    for ctx in contexts:
        for d in drafters:
            d.prefill(ids[:ctx])
        for _ in range(reps):
            for n, d in zip(names, drafters):
                times = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    d.extend([ids[ctx]])
                    times.append(time.perf_counter() - t0)
                    d.rollback(1)
                med = round(statistics.median(times) * 1000, 3)
                best[n][ctx] = min(best[n].get(ctx, med), med)
    return best


if __name__ == "__main__":
    sys.exit(main())
