"""The pair on the device (#18, #23): the ExecuTorch drafter program and the ExecuTorch target
program against the target program alone, with the product's draft length: the cost model's
choice on this CPU, re-estimated online (decode/draft_length.py CostModelK).

1. cost: the target's v(n) and the drafter's ms per token (pairs/cost.py, the `omnidraft cost` path);
2. calibration on prompts not measured later (k = --k-calibrate, as `omnidraft pair` does):
   per-position acceptance and translation ms per round;
3. the cost model's choice (0 = the target alone), with its predicted tokens/s;
4. code and chat prompts, interleaved per prompt: the target alone, the pair with the cost
   model (online), the pair at a fixed k, then the baselines: llama.cpp's target alone and
   transformers' assisted generation at its default and at its best setting (5 tokens, constant)
   (greedy; the pair's output must equal the program's own, token for token).
`--before` runs the programs as before #23's fix (torch loaded first, MKL teams inside
ExecuTorch's pool) for the before/after comparison.

  python scripts/bench_device_pair.py --target qwen2.5-coder-0.5b --code 6 --chat 6
Writes bench/results/device-pair[-before]-<stamp>.{json,md}.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))



def main() -> int:
    before = "--before" in sys.argv
    if before:
        import torch  # noqa: F401 - first: MKL keeps its per-thread teams (the state before #23)

        from omnidraft.device import runtime

        runtime.program_call = nullcontext
    else:
        from omnidraft.device.threads import configure_process

        configure_process()
    import benchio
    from baselines import baselines as bench_baselines
    import benchsetup

    ap = benchsetup.parser(__doc__, dtype="--dtype", k=False)
    ap.add_argument("--before", action="store_true", help="run as before #23's fix")
    ap.add_argument("--code", type=int, default=6)
    ap.add_argument("--chat", type=int, default=6)
    ap.add_argument("--calibrate", type=int, default=4, help="calibration prompts (half code, half chat)")
    ap.add_argument("--k-calibrate", type=int, default=5)
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--fixed-k", type=int, default=3, help="also run the pair at this k")
    ap.add_argument("--quant", default="8da8w", help="the target program's scheme")
    ap.add_argument("--no-baselines", action="store_true", help="skip llama.cpp and transformers' assisted "
                    "generation (run per prompt, interleaved, by default)")
    args = ap.parse_args()
    args.max_new_tokens = 64 if "--max-new-tokens" not in sys.argv else args.max_new_tokens
    benchsetup.start(args.threads)
    log = benchsetup.logger("device-pair" + ("-before" if before else ""))
    from omnidraft.decode.draft_length import CostModelK, FixedK
    from omnidraft.decode.generate import generate_ar, generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.lm import same_start
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.build import load_drafter, local_target
    from omnidraft.device.cpu import cpu_info
    from omnidraft.pairs.timing import measure
    from omnidraft.propose.config import SpecConfig
    from omnidraft.translate.state import PairState

    drafter = load_drafter(args.drafter, "executorch")
    target = local_target(args.target, "executorch", quant=args.quant)
    verifier = LocalTarget(target)  # greedy
    dtok, ttok = load_tokenizer(args.drafter), load_tokenizer(args.target)
    pair = PairState(dtok, ttok, drafter.vocab_size, target.vocab_size)
    model = measure(target, drafter, tuple(range(1, args.k_max + 2)), progress=log)

    half = args.calibrate // 2
    calib = benchsetup.prompt_mix(half, args.calibrate - half, code_start=40, chat_start=12)
    dl, translate = CostModelK(model, k_max=args.k_max), []
    with dl.fixed(args.k_calibrate):  # every calibration prompt's rounds, counted together
        for p, chat in calib:
            m = generate_speculative(drafter, verifier, pair, p, cfg=SpecConfig("omnidraft"), k=dl,
                                     max_new_tokens=args.max_new_tokens, chat=chat).metrics
            translate.append(m["translate_ms_median"] or 0.0)
    accept = dl.rates()
    model.translate_ms = round(sum(translate) / max(len(translate), 1), 3)
    dl.reestimate()
    k, predicted = dl.state()["k"], dl.state()["predicted_tokens_per_s"]
    log(f"per-position acceptance {[round(a, 3) for a in accept]}; cost model: k={k}, predicted "
        f"{predicted:.2f} tokens/s vs {model.tokens_per_s(accept, 0):.2f} alone")

    baselines = {} if args.no_baselines else bench_baselines(args.target, args.drafter, args.threads, log)
    sets = {"code": benchsetup.prompt_mix(args.code, 0), "chat": benchsetup.prompt_mix(0, args.chat)}
    runs = {"cost model": dl, f"k = {args.fixed_k}": FixedK(args.fixed_k)}  # the product, and a fixed k
    rows, report = [], benchio.stamp_report(cpu=cpu_info(), before_fix=before, cost=model.to_dict(),
                                            position_acceptance=accept, k=k, predicted_tokens_per_s=predicted,
                                            rows=[])
    for name, prompts in sets.items():
        alone = benchio.Tally()
        tallies = {r: benchio.Tally() for r in runs}
        forwards = dict.fromkeys(runs, 0)
        decode = {r: [0, 0.0] for r in ["alone", *runs]}  # new tokens, seconds after the prefill
        base = {b: [0, 0.0] for b in baselines}  # new tokens, seconds (whole generation)
        state = dl.state()  # what the cost model reads before this set
        for i, (p, chat) in enumerate(prompts):  # interleaved per prompt: alone, the pair runs, baselines
            again = same_start(target, drafter)  # every run finds what the first found
            again()
            ref = generate_ar(verifier, ttok, p, max_new_tokens=args.max_new_tokens, chat=chat)
            alone.add(benchio.filled(ref.metrics))
            decode["alone"][0] += ref.metrics["new_tokens"]
            decode["alone"][1] += ref.metrics["wall_s"] - ref.metrics["prefill_s"]
            for r, length in runs.items():
                again()
                got = generate_speculative(drafter, verifier, pair, p, cfg=SpecConfig("omnidraft"), k=length,
                                           max_new_tokens=args.max_new_tokens, chat=chat)
                m = benchio.filled(got.metrics)
                tallies[r].add(m, equal=got.token_ids == ref.token_ids)
                forwards[r] += m["target_forwards"]
                decode[r][0] += m["new_tokens"]
                decode[r][1] += m["wall_s"] - m["prefill_s"]
            ids = encode_prompt(ttok, p, chat=chat)
            for b, run in baselines.items():
                n, secs = run(ids, args.max_new_tokens)
                base[b][0] += n
                base[b][1] += secs
            log(f"{name} {i + 1}/{len(prompts)}: alone {ref.metrics['tokens_per_s']:.2f} tokens/s; cost model "
                f"k = {dl.state()['k']}")
        report.setdefault("baselines", {})[name] = {b: round(n / secs, 3) for b, (n, secs) in base.items()}
        report["baselines"][name]["executorch target alone"] = alone.tokens_per_s()
        for r, length in runs.items():
            t = tallies[r]
            pred = state["predicted_tokens_per_s"] if length is dl else model.tokens_per_s(accept, args.fixed_k)
            dec = round(decode[r][0] / decode[r][1], 3)
            rows.append({"set": name, "prompts": len(prompts), "run": r, "k_at_start": state["k"] if length is dl
                         else args.fixed_k, "alone_tokens_per_s": alone.tokens_per_s(),
                         "pair_tokens_per_s": t.tokens_per_s(),
                         "ratio": round(t.tokens_per_s() / alone.tokens_per_s(), 3),
                         "predicted_tokens_per_s": round(pred, 2),
                         "alone_decode_tokens_per_s": round(decode["alone"][0] / decode["alone"][1], 3),
                         "pair_decode_tokens_per_s": dec, "prediction_error": round(pred / dec - 1, 3),
                         "tokens_per_target_forward": round(t.tokens / max(forwards[r], 1), 3),
                         "acceptance": t.acceptance_rate() if t.proposed else None, "equal_to_alone": t.equal})
    report["rows"] = rows
    cpu = report["cpu"]
    md = [f"CPU: {cpu['model']}, {cpu['cores']} cores, flags {' '.join(cpu['flags'])}; {args.threads} threads. "
          f"Drafter {args.drafter} (ExecuTorch 8da8w), target {args.target} (ExecuTorch {args.quant}, "
          f"every position's logits); greedy, {args.max_new_tokens} new tokens; "
          + ("**before #23's fix** (MKL teams inside ExecuTorch's pool)." if before else "after #23's fix."), "",
          f"Cost model: v(n) ms {model.verify_ms}; drafter {model.drafter_ms} ms/token; translation "
          f"{model.translate_ms} ms/round; per-position acceptance {[round(a, 3) for a in accept]} "
          f"-> k = {k} (predicted {predicted:.2f} tokens/s; alone {model.tokens_per_s(accept, 0):.2f}); "
          "k = 0 is the target alone. The cost-model rows re-estimate acceptance online (the product's "
          f"default); the k = {args.fixed_k} rows show what a fixed draft length gives.", ""]
    md += ["tok/s: new tokens over the whole generation (prefill included); decode tok/s: after the prefill "
           "(what the cost model predicts).", ""]
    md += benchio.table(["prompts", "draft length", "target alone tok/s", "pair tok/s", "ratio", "alone decode tok/s",
                         "pair decode tok/s", "predicted decode tok/s", "pred. error", "tokens / target forward",
                         "acceptance", "output == alone"],
                        [[f"{r['set']} ({r['prompts']})", r["run"] + (f" (k = {r['k_at_start']} at start)"
                                                                      if r["run"] == "cost model" else ""),
                          r["alone_tokens_per_s"], r["pair_tokens_per_s"], f"{r['ratio']}x",
                          r["alone_decode_tokens_per_s"], r["pair_decode_tokens_per_s"], r["predicted_tokens_per_s"],
                          f"{r['prediction_error']:+.1%}", r["tokens_per_target_forward"], r["acceptance"],
                          f"{r['equal_to_alone']}/{r['prompts']}"] for r in rows])
    if baselines:
        md += ["", "Baselines in the same run, interleaved per prompt (tok/s over the whole generation, prefill "
               "included; ratio = the ExecuTorch target alone over it):", ""]
        md += benchio.table(["prompts", "runtime", "tok/s", "ExecuTorch target alone / it"],
                            [[name, b, v, f"{report['baselines'][name]['executorch target alone'] / v:.2f}x"]
                             for name, row in report["baselines"].items() for b, v in row.items()])
    benchio.save(args.out, "device-pair" + ("-before" if before else ""),
                 "The pair on the device: ExecuTorch drafter + ExecuTorch target", report, md)
    return 0



if __name__ == "__main__":
    sys.exit(main())
