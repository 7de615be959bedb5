"""Benchmark: adaptive drafting with acceptance heads (the paper's Table 2 on our models).

A HumanEval training stream (first --train problems) is decoded once with the untrained drafter
(fixed k, greedy; records carry the target's verification) and replayed --epochs times into
each trainer. Rows on held-out prompts (last --test problems), decoded prompt by prompt with
every row interleaved so machine load hits all rows alike:
  fixed-k (untrained) | adapt only (head, drafter frozen) | distill only (fixed k) |
  joint distill + adapt (Algorithm 3) | interleaved distill + adapt (Algorithm 4), gamma sweep.
Heads use greedy labels (1[argmax q == y]) because verification is greedy here.
Writes bench/results/adaptive-<date>.json/.md.
Example:
  python scripts/bench_adaptive.py --target qwen2.5-coder-0.5b --train 64 --test 20
"""

from __future__ import annotations

import copy
import json
import sys
import time

from benchio import Tally, save, stamp_report, table
from benchsetup import load_models, logger, parser, start


def main(argv=None) -> int:
    ap = parser(__doc__, k_help="fixed draft length")
    ap.add_argument("--train", type=int, default=64)
    ap.add_argument("--test", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--max-k", type=int, default=8, help="most tokens per adaptive draft")
    ap.add_argument("--gammas", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    ap.add_argument("--gamma", type=float, default=0.5, help="gamma of the adapt-only and joint rows")
    ap.add_argument("--head-steps", type=int, default=4, help="interleaved head steps per distillation update")
    ap.add_argument("--pretrain-epochs", type=int, default=0, help="offline head pretraining passes")
    args = ap.parse_args(argv)

    from omnidraft.models.acceptance import AcceptanceHead, HeadConfig
    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.train.head_trainer import AdaptiveTrainer, HeadTrainer
    from omnidraft.prompts import humaneval
    from omnidraft.models.eager import CausalLM
    from omnidraft.propose.config import SpecConfig
    from omnidraft.train.records import build_record
    from omnidraft.train.trainer import OnlineTrainer, TrainConfig, attach_lora

    log = logger("adaptive")
    start(args.threads, seed=0)
    problems = humaneval()
    train, test = problems[: args.train], problems[len(problems) - args.test:]
    models = load_models(args.drafter, args.target, drafter_dtype="fp32", target_dtype=args.target_dtype)
    drafter, target = models.drafter, LocalTarget(models.target)
    pair = models.pair()
    seeded = copy.deepcopy(pair.cache)
    base = drafter.model
    hcfg = HeadConfig(labels="greedy", head_steps=args.head_steps)
    report = stamp_report(drafter=args.drafter, target=args.target, target_dtype=args.target_dtype,
                          k=args.k, max_k=args.max_k, max_new_tokens=args.max_new_tokens,
                          train_problems=args.train, test_problems=args.test, epochs=args.epochs,
                          head_config=hcfg.__dict__, rows=[], training={})

    t0 = time.perf_counter()
    records = []
    for i, p in enumerate(train):
        pair.cache = copy.deepcopy(seeded)
        r = generate_speculative(drafter, target, pair, p, cfg=SpecConfig("omnidraft"), k=FixedK(args.k),
                                 max_new_tokens=args.max_new_tokens, record_topk=64)
        records.append(build_record(pair.vmap, r.verified))
        if i % 16 == 15:
            log(f"recorded {i + 1}/{len(train)}")
    report["record_seconds"] = round(time.perf_counter() - t0, 1)

    def new_head():
        return AcceptanceHead(base.config.hidden_size, hcfg.width)

    def run(mode: str):
        """Train one variant on the record stream; returns (drafter model, head or None)."""
        t = time.perf_counter()
        tcfg = TrainConfig()
        model = base if mode == "adapt" else attach_lora(copy.deepcopy(base), tcfg)
        distill = None if mode == "adapt" else OnlineTrainer(model, tcfg)
        head = HeadTrainer(new_head(), model, hcfg) if mode != "distill" else None
        if head is not None and args.pretrain_epochs:
            head.fit(records, args.pretrain_epochs)
        if mode == "distill":
            for _ in range(args.epochs):
                for r in records:
                    distill.add(r)
        else:
            trainer = AdaptiveTrainer(distill, head, mode)
            for _ in range(args.epochs):
                for r in records:
                    trainer.add(r)
        report["training"][mode] = {
            "seconds": round(time.perf_counter() - t, 1), "distill_steps": distill.steps if distill else 0,
            "head_steps": head.steps if head else 0,
            "head_bce_last": round(head.history[-1]["bce"], 4) if head and head.history else None,
            "accept_label_mean": round(head.history[-1]["accept_label_mean"], 3) if head and head.history else None}
        log(f"trained {mode}: {json.dumps(report['training'][mode])}")
        if hasattr(model, "merge_and_unload"):
            model = copy.deepcopy(model).merge_and_unload()
        return CausalLM(model.eval(), name=args.drafter), (head.head.eval() if head else None)

    base_lm = CausalLM(base, name=args.drafter)
    _, adapt_head = run("adapt")
    distilled, _ = run("distill")
    joint_lm, joint_head = run("joint")
    inter_lm, inter_head = run("interleaved")
    fixed = (SpecConfig("omnidraft"), FixedK(args.k))
    adaptive = lambda gamma: (SpecConfig("omnidraft", gamma=gamma), FixedK(args.max_k))  # noqa: E731
    rows = [("fixed k (untrained)", base_lm, None, fixed),
            (f"adapt only (gamma {args.gamma})", base_lm, adapt_head, adaptive(args.gamma)),
            ("distill only (fixed k)", distilled, None, fixed),
            (f"joint distill + adapt (gamma {args.gamma})", joint_lm, joint_head, adaptive(args.gamma))]
    rows += [(f"interleaved distill + adapt (gamma {g})", inter_lm, inter_head, adaptive(g)) for g in args.gammas]
    tot = {name: Tally() for name, *_ in rows}
    for n, p in enumerate(test):
        for name, lm, head, (cfg, k) in rows:
            pair.cache = copy.deepcopy(seeded)
            tot[name].add(generate_speculative(lm, target, pair, p, cfg=cfg, k=k, max_new_tokens=args.max_new_tokens,
                                               head=head).metrics)
        log(f"evaluated prompt {n + 1}/{len(test)}")
    for name, *_ in rows:
        t = tot[name]
        report["rows"].append({"row": name, "acceptance_rate": t.acceptance_rate(),
                               "proposed_per_step": round(t.proposed / max(t.steps, 1), 2),
                               "tokens_per_step": round(t.tokens / max(t.steps, 1), 3),
                               "tokens_per_s": t.tokens_per_s()})
    ref = next(r["tokens_per_s"] for r in report["rows"] if r["row"].startswith("distill only"))
    md = [f"{args.drafter} (fp32) -> {args.target} ({args.target_dtype}), greedy, fixed k={args.k}, adaptive "
          f"max k={args.max_k}; train stream HumanEval[:{args.train}] x {args.epochs} epochs, held-out "
          f"HumanEval[-{args.test}:], {args.max_new_tokens} new tokens; `{report['command']}`", ""]
    md += table(["row", "acceptance", "proposed/step", "tokens/step", "tokens/s", "vs distill only"],
                [[r["row"], r["acceptance_rate"], r["proposed_per_step"], r["tokens_per_step"], r["tokens_per_s"],
                  f"{r['tokens_per_s'] / ref:.2f}x"] for r in report["rows"]])
    md += ["", "Training: " + "; ".join(f"{k}: {v['seconds']} s, {v['distill_steps']} distill + "
                                        f"{v['head_steps']} head steps" for k, v in report["training"].items())]
    save(args.out, "adaptive", "Adaptive drafting benchmark", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
