"""Does a target program give a position the same logits whether it is computed alone or inside a
wider call? Greedy speculative output equals the program's own greedy output only if it does
(up to ties). For each prompt: prefill, then at the same cache state compare the last row of a
w-token call with the one-token call of that token (after the first w-1 tokens, one by one), and
report the largest |logit difference| and the greedy-equality of the pair at k = 3.

  python scripts/check_batch_invariance.py --target qwen2.5-coder-0.5b --quant 8da8w
Writes bench/results/batch-invariance-<stamp>.{json,md}.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    from omnidraft.device.threads import configure_process

    configure_process()
    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, dtype="--dtype", k=False, prompts=4)
    ap.add_argument("--quant", default="8da8w")
    ap.add_argument("--widths", default="2,4,8")
    args = ap.parse_args()
    benchsetup.start(args.threads)
    log = benchsetup.logger("batch-invariance")

    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_ar, generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.build import load_drafter, local_target
    from omnidraft.device.cpu import cpu_info
    from omnidraft.propose.config import SpecConfig
    from omnidraft.translate.state import PairState

    target = local_target(args.target, "executorch", quant=args.quant)
    verifier = LocalTarget(target)  # greedy
    drafter = load_drafter(args.drafter, "executorch")
    ttok, dtok = load_tokenizer(args.target), load_tokenizer(args.drafter)
    pair = PairState(dtok, ttok, drafter.vocab_size, target.vocab_size)
    widths = [int(w) for w in args.widths.split(",")]
    prompts = benchsetup.prompt_mix(args.prompts - args.prompts // 2, args.prompts // 2)
    rows = []
    for p, chat in prompts:
        ids = encode_prompt(ttok, p, chat=chat)
        cont = generate_ar(verifier, ttok, p, max_new_tokens=max(widths), chat=chat).token_ids
        diffs = {}
        for w in widths:
            target.prefill(ids)
            wide = target.extend(cont[:w]).logits[-1]  # the w-th token's row inside a w-token call
            target.truncate(len(ids))
            for t in cont[: w - 1]:
                target.extend([t])
            alone = target.extend([cont[w - 1]]).logits[-1]  # the same position, one token per call
            diffs[w] = round(float((wide - alone).abs().max()), 6)
        ref = generate_ar(verifier, ttok, p, max_new_tokens=args.max_new_tokens, chat=chat).token_ids
        spec = generate_speculative(drafter, verifier, pair, p, cfg=SpecConfig("omnidraft"), k=FixedK(3),
                                    max_new_tokens=args.max_new_tokens, chat=chat).token_ids
        first = next((i for i, (a, b) in enumerate(zip(ref, spec)) if a != b), None)
        rows.append({"prompt": p[:40], "max_abs_logit_diff": diffs, "greedy_equal": spec == ref,
                     "first_divergence": first})
        log(f"{p[:30]!r}: {diffs}; greedy equal {spec == ref} (first divergence {first})")
    cpu = cpu_info()
    report = benchio.stamp_report(cpu=cpu, target=args.target, quant=args.quant, rows=rows)
    md = [f"CPU: {cpu['model']} ({' '.join(cpu['flags'])}); target {args.target} ExecuTorch {args.quant}. "
          "Largest |logit difference| between a position's row inside a w-token call and the same "
          f"position computed one token per call (same cache); greedy pair (k = 3) vs the program's own "
          f"greedy output over {args.max_new_tokens} tokens.", ""]
    md += benchio.table(["prompt", *[f"max |d logit|, w={w}" for w in widths], "pair == own greedy",
                         "first divergence"],
                        [[r["prompt"].replace("\n", " ").replace("|", "/"), *[r["max_abs_logit_diff"][w] for w in widths],
                          r["greedy_equal"], r["first_divergence"]] for r in rows])
    benchio.save(args.out, "batch-invariance", "Batch invariance of a target program", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
