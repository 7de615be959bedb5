"""Where acceptance is lost (#20): the rejection breakdown of the real pair, and the default
strategy's acceptance beside the best string-level one.

The SmolLM2-135M ExecuTorch drafter drafts for each target program (greedy, fixed k, no
training: the untrained pair; `--adapter` adds a trained version's rows); every round is
classified by decode/rejections.py — acceptance by draft position, by how each proposed token
was translated (direct map, n-gram merge, a later token of a multi-token entry, special token),
and the first rejection's cause (drafter wrong, translation wrong, draft ended inside the
target's token, special token), plus drafted tokens that could not be translated. `omnidraft`
and `slem` run on the same prompts, interleaved per prompt; tokens per target forward is the
comparison that does not depend on how a strategy splits its proposal. Unpaired runs drift apart
after their first different round (the drafter's numerics then see other histories), so the
first strategy's rows also carry the paired figure: `slem`'s translation of the very drafts each
of its rounds made, matched against the target's greedy output (decode/rejections.py
``paired_accepted``).

Prompts: the last 10 HumanEval problems (the held-out set of bench_strategies) and ShareGPT
chat prompts (bench extra) from 200 on (past the usage streams' first prompts).

  python scripts/bench_rejections.py --targets qwen2.5-coder-0.5b,qwen2.5-coder-1.5b
Writes bench/results/rejections-<stamp>.{json,md}.
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

    ap = benchsetup.parser(__doc__, target=None, dtype="--dtype", max_new_tokens=96)
    ap.set_defaults(k=5)
    ap.add_argument("--targets", default="qwen2.5-coder-0.5b")
    ap.add_argument("--code", type=int, default=10)
    ap.add_argument("--chat", type=int, default=10)
    ap.add_argument("--strategies", default="omnidraft,omnidraft/cache,slem",
                    help="omnidraft/cache: omnidraft without the target's tokenisation (cache + direct map only)")
    ap.add_argument("--adapter", action="append", default=[], metavar="LABEL=PTD",
                    help="also run the first strategy with this adapter version's .ptd in the drafter program "
                         "(a trained pair: pairs/<pair>/executorch/<program>/vNNNN.ptd), interleaved per prompt")
    args = ap.parse_args()
    adapters = [a.split("=", 1) for a in args.adapter]
    if any(len(a) != 2 or not Path(a[1]).is_file() for a in adapters):
        ap.error(f"--adapter wants LABEL=PATH of an existing .ptd, got {args.adapter}")
    benchsetup.start(args.threads)
    log = benchsetup.logger("rejections")
    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_speculative
    from omnidraft.decode.rejections import CAUSES, KINDS, Breakdown, paired_accepted
    from omnidraft.decode.target import LocalTarget
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.build import load_drafter, local_target
    from omnidraft.device.cpu import cpu_info
    from omnidraft.prompts import humaneval, sharegpt
    from omnidraft.propose.config import SpecConfig
    from omnidraft.translate.state import PairState
    from omnidraft.translate.strings import StringTranslator

    problems = humaneval()
    sets = {"code": [(p, False) for p in problems[len(problems) - args.code:]],
            "chat": [(p, True) for p in sharegpt(args.chat, start=200)]}
    drafter = load_drafter(args.drafter, "executorch")
    base_ptd = drafter.ptd  # the untrained pair's zero adapter
    variants = {s: (s, base_ptd) for s in args.strategies.split(",")}  # row label -> (strategy, adapter)
    first = args.strategies.split(",")[0]
    variants.update({f"{first}, {label}": (first, Path(ptd)) for label, ptd in adapters})
    strategies = list(variants)
    dtok = load_tokenizer(args.drafter)
    report = benchio.stamp_report(cpu=cpu_info(), drafter=args.drafter, k=args.k,
                                  max_new_tokens=args.max_new_tokens, results={})
    trained = "".join(f"; trained adapter {label}: {ptd}" for label, ptd in adapters)
    md = [f"{args.drafter} (ExecuTorch 8da8w, untrained{trained}) -> each target's ExecuTorch 8da8w program; greedy, "
          f"k = {args.k} every round, {args.max_new_tokens} new tokens; strategies interleaved per prompt. "
          f"`{report['command']}`", ""]
    for name in args.targets.split(","):
        target = LocalTarget(local_target(name, "executorch"))  # greedy
        ttok = load_tokenizer(name)
        for set_name, prompts in sets.items():
            pairs = {s: PairState(dtok, ttok, drafter.vocab_size, target.vocab_size) for s in strategies}
            tallies = {s: Breakdown(pairs[s].vmap) for s in strategies}
            totals = {s: [0, 0] for s in strategies}  # new tokens, target forwards
            paired = {s: {} for s in strategies if variants[s][0] == first}  # vs slem on the same drafts
            for i, (p, chat) in enumerate(prompts):
                for s in strategies:
                    strategy, ptd = variants[s]
                    if drafter.ptd != ptd:
                        drafter.load_adapter(ptd)
                    cfg = SpecConfig(strategy.split("/")[0], retokenise=not strategy.endswith("/cache"))
                    rounds = []  # this generation's, for the paired comparison

                    def on_round(r, tally=tallies[s]):
                        tally.add(r)
                        rounds.append(r)
                    res = generate_speculative(drafter, target, pairs[s], p, cfg=cfg, k=FixedK(args.k),
                                               max_new_tokens=args.max_new_tokens, chat=chat, on_round=on_round)
                    if s in paired:
                        one = paired_accepted(rounds, encode_prompt(ttok, p, chat=chat),
                                              StringTranslator(pairs[s].vmap, ttok), pairs[s].vmap)
                        paired[s] = {key: paired[s].get(key, 0) + v for key, v in one.items()}
                    totals[s][0] += res.metrics["new_tokens"]
                    totals[s][1] += res.metrics["target_forwards"]
                log(f"{name} {set_name} {i + 1}/{len(prompts)}: " + ", ".join(
                    f"{s} acceptance {tallies[s].summary()['acceptance']}" for s in strategies))
            out = {s: {**tallies[s].summary(), "tokens_per_forward": round(n / f, 3),
                       **({"paired_with_slem": paired[s]} if s in paired else {})}
                   for s, (n, f) in totals.items()}
            report["results"].setdefault(name, {})[set_name] = out
            md += [f"## {name}, {set_name} ({len(prompts)} prompts)", ""]
            md += benchio.table(["strategy", "acceptance", "tokens / target forward", "rounds all accepted",
                                 "rounds cut short (untranslatable draft)", "drafts not translated"],
                                [[s, o["acceptance"], o["tokens_per_forward"],
                                  f"{o['all_accepted_rounds']}/{o['rounds']}", o["cut_rounds"],
                                  o["untranslated_drafts"]] for s, o in out.items()])
            md += [""] + benchio.table(
                ["strategy", "tokens accepted", "slem's translation of the same drafts: tokens accepted",
                 "rounds", "rounds that differ", "of which slem accepted more"],
                [[s, q["accepted"], q["other_accepted"], q["rounds"], q["differ"], q["other_more"]]
                 for s, o in out.items() if (q := o.get("paired_with_slem"))])
            width = max(len(o["by_position"]) for o in out.values())
            md += [""] + benchio.table(
                ["strategy", *[f"position {i}: acceptance (proposed)" if i == 0 else f"{i}" for i in range(width)]],
                [[s, *[f"{b['acceptance']} ({b['proposed']})" for b in o["by_position"]],
                  *[""] * (width - len(o["by_position"]))] for s, o in out.items()])
            md += [""] + benchio.table(
                ["strategy", *[f"{k}: accepted/proposed" for k in KINDS], "of which n-gram entries (cache or re-tokenised)"],
                [[s, *[f"{o['by_kind'][k]['accepted']}/{o['by_kind'][k]['proposed']}" for k in KINDS],
                  f"{o['ngram_cache']['accepted']}/{o['ngram_cache']['proposed']}"] for s, o in out.items()])
            md += [""] + benchio.table(
                ["strategy", "first rejections", *CAUSES],
                [[s, sum(o["first_rejection_cause"].values()),
                  *[o["first_rejection_cause"][c] for c in CAUSES]] for s, o in out.items()])
            md.append("")
        del target  # one target program in memory at a time
    cpu = report["cpu"]
    md.insert(1, f"CPU: {cpu['model']}, {cpu['cores']} cores, flags {' '.join(cpu['flags'])}.")
    title = "the untrained pair's rejections" + (" beside trained adapters'" if adapters else "")
    benchio.save(args.out, "rejections", f"Where acceptance is lost: {title}", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
