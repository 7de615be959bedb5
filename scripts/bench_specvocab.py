"""Benchmark: SpecVocab for the drafter's LM head (SVD-initialised ranking, rank H/16).

1. LM-head time per decode row: the full head vs ranking + top-k + exact logits on the
   candidates, for several k, on real hidden states of the drafter (HumanEval prompts); and how
   often the sparse head's argmax equals the full head's.
2. End to end on the real pair (greedy, omnidraft, fixed k): acceptance, tokens/s and output
   equality with the target alone, full head vs SpecVocab at --k-vocab, interleaved per prompt.
Writes bench/results/specvocab-<date>.json/.md.
Example:
  python scripts/bench_specvocab.py --target qwen2.5-coder-0.5b --prompts 10
"""

from __future__ import annotations

import sys
import time

from benchio import Tally, save, stamp_report, table
from benchsetup import Models, load, logger, parser, start


def hidden_states(model, dtok, prompts: list[str]):
    """The last hidden states of the drafter's HF ``model`` over each prompt, stacked: [tokens, H]."""
    import torch

    with torch.inference_mode():
        return torch.cat([model.model(input_ids=torch.tensor([dtok(p)["input_ids"]])).last_hidden_state[0]
                          for p in prompts])


def specvocab_lm(model, k_vocab: int, ranker=None):
    """``model`` with a SpecVocab head of ``k_vocab`` candidates, ranked by ``ranker``'s weights
    (None: the SVD initialisation)."""
    from omnidraft.models.specvocab import SpecVocabLM

    sv = SpecVocabLM(model, k=k_vocab)
    if ranker is not None:
        sv.ranker.load_state_dict(ranker.state_dict())
    return sv


def main(argv=None) -> int:
    ap = parser(__doc__, prompts=10, k_help="draft length")
    ap.add_argument("--k-vocab", type=int, default=2048, help="SpecVocab candidates for the end-to-end rows")
    ap.add_argument("--k-sweep", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--train-steps", type=int, default=300, help="offline ranker distillation steps "
                    "on the drafter's hidden states over prompts disjoint from the test prompts")
    args = ap.parse_args(argv)

    import torch

    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_ar, generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.prompts import humaneval
    from omnidraft.models.eager import CausalLM
    from omnidraft.propose.config import SpecConfig
    from omnidraft.prompts import CHAT_PROMPTS
    from omnidraft.models.specvocab import SpecVocabHead, pretrain_ranker

    start(args.threads)
    log = logger("specvocab")
    prompts = humaneval(limit=args.prompts)
    dtok, drafter = load(args.drafter, "fp32")
    model = drafter.model
    W = model.get_output_embeddings().weight  # [V, H]
    report = stamp_report(drafter=args.drafter, target=args.target, target_dtype=args.target_dtype,
                          k=args.k, k_vocab=args.k_vocab, prompts=len(prompts),
                          max_new_tokens=args.max_new_tokens, vocab=W.shape[0], hidden=W.shape[1],
                          head_rows=[], end_to_end=[])
    hidden = hidden_states(model, dtok, prompts)  # [N, H]
    with torch.inference_mode():
        full_top1 = (hidden @ W.T).argmax(-1)

    def median(fn, x):
        ts = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn(x)
            ts.append(time.perf_counter() - t0)
        return sorted(ts)[len(ts) // 2]

    # training text: HumanEval problems after the test ones, and the chat prompts
    train_hidden = hidden_states(model, dtok, humaneval()[args.prompts:args.prompts + 100] + CHAT_PROMPTS)  # [M, H]
    ranker = SpecVocabHead(W)
    t0 = time.perf_counter()
    losses = pretrain_ranker(ranker, W, train_hidden, steps=args.train_steps, progress=log)
    report["ranker_training"] = {"steps": args.train_steps, "rows": int(train_hidden.shape[0]),
                                 "seconds": round(time.perf_counter() - t0, 1),
                                 "kl_first": round(losses[0], 3) if losses else None,
                                 "kl_last": round(losses[-1], 3) if losses else None}

    with torch.inference_mode():
        rows = hidden[:64]  # decode: one row at a time
        full_s = sum(median(lambda h: h @ W.T, rows[i:i + 1]) for i in range(len(rows))) / len(rows)
        for kv, trained in [(kv, True) for kv in args.k_sweep] + [(args.k_vocab, False)]:
            sv = specvocab_lm(model, kv, ranker if trained else None)
            sparse_s = sum(median(sv.sparse_logits, rows[i:i + 1]) for i in range(len(rows))) / len(rows)
            agree = float((sv.sparse_logits(hidden).argmax(-1) == full_top1).float().mean())
            row = {"k_vocab": kv, "ranker": "distilled" if trained else "SVD init", "full_head_ms": round(full_s * 1e3, 3), "specvocab_ms": round(sparse_s * 1e3, 3),
                   "speedup": round(full_s / sparse_s, 2), "argmax_agreement": round(agree, 4),
                   "rows": int(hidden.shape[0])}
            report["head_rows"].append(row)
            log(str(row))

    models = Models(dtok, drafter, *load(args.target, args.target_dtype))
    ttok, target = models.ttok, LocalTarget(models.target)  # greedy
    pair = models.pair()
    configs = {"full head": drafter, f"SpecVocab k={args.k_vocab}": CausalLM(specvocab_lm(model, args.k_vocab, ranker))}
    tot = {n: Tally() for n in configs}
    for i, p in enumerate(prompts):
        ref = generate_ar(target, ttok, p, max_new_tokens=args.max_new_tokens).token_ids
        for name, lm in configs.items():
            r = generate_speculative(lm, target, pair, p, cfg=SpecConfig("omnidraft"), k=FixedK(args.k),
                                     max_new_tokens=args.max_new_tokens)
            tot[name].add(r.metrics, equal=r.token_ids == ref)
        log(f"prompt {i + 1}/{len(prompts)}")
    for name, t in tot.items():
        report["end_to_end"].append({"drafter_head": name, "acceptance_rate": t.acceptance_rate(),
                                     "tokens_per_s": t.tokens_per_s(), "equal_to_target": f"{t.equal}/{len(prompts)}"})
    md = [f"{args.drafter} LM head ({W.shape[0]} x {W.shape[1]}), ranking rank {W.shape[1] // 16}, SVD init "
          f"then distilled offline toward the full head ({report['ranker_training']}); "
          f"`{report['command']}`", ""]
    md += table(["k (candidates)", "ranker", "full head ms/row", "SpecVocab ms/row", "speedup", "argmax agreement"],
                [[r["k_vocab"], r["ranker"], r["full_head_ms"], r["specvocab_ms"], f"{r['speedup']}x",
                  r["argmax_agreement"]] for r in report["head_rows"]])
    md += ["", f"End to end: {args.drafter} -> {args.target} ({args.target_dtype}), greedy omnidraft k={args.k}, "
               f"{len(prompts)} HumanEval prompts, {args.max_new_tokens} new tokens", ""]
    md += table(["drafter head", "acceptance", "tokens/s", "output == target alone"],
                [[r["drafter_head"], r["acceptance_rate"], r["tokens_per_s"], r["equal_to_target"]]
                 for r in report["end_to_end"]])
    save(args.out, "specvocab", "SpecVocab benchmark", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
