"""Benchmark: every strategy of the seed papers in one engine, one run, the same real pair and
prompts (issue: ar, tli, slem, slrs, dtw, omnidraft, omnidraft + adaptive drafting, omnidraft
with a SpecVocab drafter head). Greedy; rows interleaved per prompt.

Test prompts: the last --prompts HumanEval problems. The acceptance head for the adaptive row is
trained offline on records of the first --head-records problems (the online benchmark's cached
records when present); the SpecVocab ranking is distilled offline on drafter hidden states of
other HumanEval problems. Where an output differs from ar, the target's top-2 logit gap at the
first divergence is reported (a near-tie when small: a bf16 rounding flip, not a bug).
Writes bench/results/strategies-<date>.json/.md.
Example:
  python scripts/bench_strategies.py --target qwen2.5-coder-0.5b --prompts 10 --threads 1
"""

from __future__ import annotations

import sys
import time

from bench_speculative import NEAR_TIE, aggregate, first_divergence
from bench_specvocab import hidden_states, specvocab_lm
from benchio import save, stamp_report, table, training_records
from benchsetup import load_models, logger, parser, start


def main(argv=None) -> int:
    ap = parser(__doc__, dtype="--dtype", dtype_help="target dtype", prompts=10)
    ap.add_argument("--gamma", type=float, default=0.5)
    ap.add_argument("--max-k", type=int, default=8)
    ap.add_argument("--head-records", type=int, default=120)
    ap.add_argument("--head-epochs", type=int, default=3)
    ap.add_argument("--k-vocab", type=int, default=2048)
    ap.add_argument("--ranker-steps", type=int, default=300)
    args = ap.parse_args(argv)

    from omnidraft.models.acceptance import AcceptanceHead, HeadConfig
    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_ar, generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.train.head_trainer import HeadTrainer
    from omnidraft.prompts import humaneval
    from omnidraft.models.eager import CausalLM
    from omnidraft.propose.config import SpecConfig
    from omnidraft.models.specvocab import SpecVocabHead, pretrain_ranker
    from omnidraft.decode.text import encode_prompt

    log = logger("strategies")
    start(args.threads, seed=0)
    problems = humaneval()
    test = problems[len(problems) - args.prompts:]
    models = load_models(args.drafter, args.target, drafter_dtype="fp32", target_dtype=args.dtype)
    ttok, drafter, target = models.ttok, models.drafter, models.target
    verifier = LocalTarget(target)  # greedy
    pair0 = models.pair()
    report = stamp_report(drafter=args.drafter, target=args.target, target_dtype=args.dtype,
                          k=args.k, gamma=args.gamma, max_k=args.max_k, k_vocab=args.k_vocab,
                          max_new_tokens=args.max_new_tokens, test_prompts=test, results=[])

    # the acceptance head: offline on training-stream records (HumanEval problems before the test)
    t0 = time.perf_counter()
    records = training_records(drafter, target, pair0, problems[: args.head_records],
                               drafter_name=args.drafter, target_name=args.target, target_dtype=args.dtype,
                               k=4, max_new_tokens=48)  # the online benchmark's records when present
    hcfg = HeadConfig(labels="greedy")
    trainer = HeadTrainer(AcceptanceHead(drafter.config.hidden_size, hcfg.width), drafter.model, hcfg)
    hist = trainer.fit(records, args.head_epochs)
    head = trainer.head.eval()
    report["head_training"] = {"records": len(records), "epochs": args.head_epochs, "steps": trainer.steps,
                               "bce_first": round(hist[0]["bce"], 4), "bce_last": round(hist[-1]["bce"], 4),
                               "seconds": round(time.perf_counter() - t0, 1)}
    log(f"head: {report['head_training']}")

    # the SpecVocab ranking: offline on drafter hidden states of HumanEval problems before the test
    t0 = time.perf_counter()
    W = drafter.model.get_output_embeddings().weight  # [V, H]
    hidden = hidden_states(drafter.model, models.dtok, problems[: len(problems) - args.prompts][:100])  # [N, H]
    ranker = SpecVocabHead(W)
    losses = pretrain_ranker(ranker, W, hidden, steps=args.ranker_steps)
    sv = specvocab_lm(drafter.model, args.k_vocab, ranker)
    report["ranker_training"] = {"steps": args.ranker_steps, "rows": int(hidden.shape[0]),
                                 "kl_first": round(losses[0], 3), "kl_last": round(losses[-1], 3),
                                 "seconds": round(time.perf_counter() - t0, 1)}
    log(f"ranker: {report['ranker_training']}")
    sv_lm = CausalLM(sv, name=f"{args.drafter}+specvocab")

    fixed = lambda s: (SpecConfig(s), FixedK(args.k))  # noqa: E731
    rows = [("ar", None, (None, None), None),
            ("tli", drafter, fixed("tli"), None),
            ("slem", drafter, fixed("slem"), None),
            ("slrs", drafter, fixed("slrs"), None),
            ("dtw", drafter, fixed("dtw"), None),
            ("omnidraft", drafter, fixed("omnidraft"), None),
            (f"omnidraft + adaptive (gamma {args.gamma}, k <= {args.max_k})", drafter,
             (SpecConfig("omnidraft", gamma=args.gamma), FixedK(args.max_k)), head),
            (f"omnidraft + SpecVocab (k_vocab {args.k_vocab})", sv_lm, fixed("omnidraft"), None)]
    pairs = {name: models.pair() for name, *_ in rows[1:]}
    runs = {name: [] for name, *_ in rows}
    for n, p in enumerate(test):
        pids = encode_prompt(ttok, p, chat=False)
        for name, lm, (cfg, k), hd in rows:
            if lm is None:
                r = generate_ar(verifier, ttok, p, max_new_tokens=args.max_new_tokens)
                runs[name].append({**r.metrics, "token_ids": r.token_ids})
                continue
            r = generate_speculative(lm, verifier, pairs[name], p, cfg=cfg, k=k, head=hd,
                                     max_new_tokens=args.max_new_tokens)
            runs[name].append({**r.metrics, "token_ids": r.token_ids, "translate_ms": r.raw.translate_ms,
                               "step_ms": r.raw.step_ms})
        ref = runs["ar"][-1]["token_ids"]
        for name, *_ in rows[1:]:
            runs[name][-1]["divergence"] = first_divergence(target, pids, ref, runs[name][-1]["token_ids"])
        log(f"prompt {n + 1}/{len(test)} done")
    for name, lm, cfg, _ in rows:
        row = aggregate(runs[name], None if lm is None else runs["ar"])
        row["strategy"] = name
        if lm is None:
            row["speedup_vs_ar"] = 1.0
        row["drafter_forwards_per_step"] = (round(sum(r.get("drafter_forwards", 0) for r in runs[name]) /
                                                  max(1, sum(r.get("steps", 0) for r in runs[name])), 2)
                                            if lm is not None else None)
        report["results"].append(row)
        log(f"{name}: {row['tokens_per_s']} tok/s, acc {row['acceptance_rate']}, x{row['speedup_vs_ar']}")
    md = [f"{args.drafter} (fp32) -> {args.target} ({args.dtype}), {args.threads} threads, greedy, "
          f"{len(test)} held-out HumanEval prompts (the last {len(test)}), {args.max_new_tokens} new "
          f"tokens, k = {args.k}; rows interleaved per prompt. `{report['command']}`", "",
          f"Acceptance head: offline on {len(records)} training-stream records x {args.head_epochs} epochs; "
          f"SpecVocab ranking: {args.ranker_steps} offline distillation steps.", ""]
    md += table(["strategy", "acceptance", "accepted/step", "drafter forwards/step", "tokens/s", "speedup vs ar",
                 "greedy == ar"],
                [[r["strategy"], r["acceptance_rate"] or "", r["mean_accepted_per_step"] or "",
                  r["drafter_forwards_per_step"] or "", r["tokens_per_s"], f"{r['speedup_vs_ar']}x",
                  "" if r["equal_to_ar"] is None else f"{r['equal_to_ar']}/{r['prompts']}"]
                 for r in report["results"]])
    gaps = [(r["strategy"], d["index"], d["top2_gap"]) for r in report["results"] for d in r.get("divergences") or []]
    md += ["", f"Outputs that differ from ar: {len(gaps)}. At each first divergence, the target's top-2 "
           f"logit gap (a near-tie when below {NEAR_TIE} in {args.dtype}): "
           + (", ".join(f"{s} @{i}: {g}" for s, i, g in gaps) or "none")]
    save(args.out, "strategies", "All strategies, one run", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
