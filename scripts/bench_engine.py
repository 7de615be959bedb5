"""A Session that may hand generations to llama.cpp (#39 item 3): `Session(engine="llamacpp")`
runs each generation as the pair (copies from the context + drafts, the cost model's choice) or
as llama.cpp alone on the target's GGUF, whichever it has measured faster (pairs/engine_choice.py,
seeded by `omnidraft pair --engine llamacpp`). Does that make the product no slower than the
honest alternatives on every kind of prompt?

Per prompt, interleaved: the Session with the engine, the same Session's pair only, the ExecuTorch
target alone, llama.cpp alone (its own instance) and transformers' assisted generation at its best
setting; on code, chat and copy-heavy prompts (greedy; the pair's output must equal the target
program's own; llama.cpp's is its own greedy output of the GGUF).

  omnidraft pair --target qwen2.5-coder-1.5b --engine llamacpp
  python scripts/bench_engine.py --target qwen2.5-coder-1.5b --code 4 --chat 4 --copy 4
Writes bench/results/engine-<stamp>.{json,md}. Needs the llamacpp extra.
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
    from baselines import BEST, baselines

    ap = benchsetup.parser(__doc__, dtype="--dtype", k=False, target="qwen2.5-coder-1.5b")
    ap.add_argument("--code", type=int, default=4)
    ap.add_argument("--chat", type=int, default=4)
    ap.add_argument("--copy", type=int, default=4)
    args = ap.parse_args()
    args.max_new_tokens = 64 if "--max-new-tokens" not in sys.argv else args.max_new_tokens
    benchsetup.start(args.threads)
    log = benchsetup.logger("engine")

    from omnidraft import Session
    from omnidraft.copy_prompts import copy_prompts
    from omnidraft.decode.generate import generate_ar
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.lm import same_start
    from omnidraft.pairs.cost import cpu_info

    s = Session(args.drafter, args.target, engine="llamacpp", log=False)
    start = {"pair_tokens_per_s": s.engine_choice.pair_tokens_per_s,
             "engine_tokens_per_s": s.engine_choice.engine_tokens_per_s}
    log(f"engine choice at the start: {start}")
    others = baselines(args.target, args.drafter, args.threads, log, assisted=(BEST,), dtype=args.dtype)
    ttok = s.target_tok

    def conversation(turns: list[str]) -> str:
        """The measured prompt: the chat template over the conversation, earlier answers the
        target program's own greedy ones."""
        messages = []
        for turn in turns[:-1]:
            answer = generate_ar(s.target, ttok, turn, max_new_tokens=args.max_new_tokens, chat=True)
            messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": answer.text}]
        messages.append({"role": "user", "content": turns[-1]})
        return ttok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    sets = {"code": benchsetup.prompt_mix(args.code, 0, code_start=20),  # neither pairing's nor the demo's
            "chat": benchsetup.prompt_mix(0, args.chat, chat_start=14),
            "copy": [(conversation(t), False) for t in copy_prompts()[: args.copy]]}
    for name, asked in (("code", args.code), ("chat", args.chat), ("copy", args.copy)):
        if len(sets[name]) < asked:
            ap.error(f"--{name} {asked}: only {len(sets[name])} such prompts from where this script starts")
    rows_md, report = [], benchio.stamp_report(cpu=cpu_info(), engine_choice_at_start=start,
                                               max_new_tokens=args.max_new_tokens, sets={})
    names = ["Session, engine=llamacpp", "Session, pair only", "ExecuTorch target alone", *others]
    for name, cases in sets.items():
        if not cases:
            continue
        tot = {n: [0, 0.0] for n in names}
        handed = equal = paired = 0
        for i, (p, chat) in enumerate(cases):
            again = same_start(s.target_model, s.drafter)
            again()
            ref = generate_ar(s.target, ttok, p, max_new_tokens=args.max_new_tokens, chat=chat)
            tot["ExecuTorch target alone"][0] += ref.metrics["new_tokens"]
            tot["ExecuTorch target alone"][1] += ref.metrics["wall_s"]
            for row in ("Session, engine=llamacpp", "Session, pair only"):
                again()
                s.new_conversation()
                if row == "Session, pair only":
                    with s.pair_only():
                        got = s.generate(p, max_new_tokens=args.max_new_tokens, chat=chat)
                else:
                    got = s.generate(p, max_new_tokens=args.max_new_tokens, chat=chat)
                    handed += bool(got.metrics.get("engine"))
                if not got.metrics.get("engine"):
                    paired += 1
                    equal += got.token_ids == ref.token_ids
                tot[row][0] += got.metrics["new_tokens"]
                tot[row][1] += got.metrics["wall_s"]
            ids = encode_prompt(ttok, p, chat=chat)
            for b, run in others.items():
                n, secs = run(ids, args.max_new_tokens)
                tot[b][0] += n
                tot[b][1] += secs
            log(f"{name} {i + 1}/{len(cases)}: " + ", ".join(f"{n} {t[0] / t[1]:.2f}" for n, t in tot.items()))
        speed = {n: round(t[0] / t[1], 3) for n, t in tot.items()}
        best_alt = max(v for n, v in speed.items() if not n.startswith("Session"))
        report["sets"][name] = {"prompts": len(cases), "tokens_per_s": speed, "handed_to_llamacpp": handed,
                                "pair_outputs_equal": f"{equal}/{paired}",
                                "engine_vs_best_alternative": round(speed["Session, engine=llamacpp"] / best_alt, 3)}
        rows_md.append([name, len(cases), *(speed[n] for n in names), f"{handed}/{len(cases)}",
                        f"{equal}/{paired}", report["sets"][name]["engine_vs_best_alternative"]])
    report["engine_choice_at_end"] = {"pair_tokens_per_s": s.engine_choice.pair_tokens_per_s,
                                      "engine_tokens_per_s": s.engine_choice.engine_tokens_per_s}
    cpu = report["cpu"]
    md = [f"CPU: {cpu['model']}, {cpu['cores']} cores, flags {' '.join(cpu['flags'])}; {args.threads} threads; "
          f"target {args.target}, greedy, {args.max_new_tokens} new tokens, tokens/s over the whole generation "
          "(prefill included), one run, interleaved per prompt. The Session's engine choice at the start "
          f"(from `omnidraft pair --engine llamacpp`): pair {start['pair_tokens_per_s']} vs llama.cpp "
          f"{start['engine_tokens_per_s']} tokens/s.", "",
          *benchio.table(["set", "prompts", *names, "handed to llama.cpp", "pair outputs equal",
                          "engine row vs the best alternative"], rows_md)]
    benchio.save(args.out, "engine", "A Session that may hand generations to llama.cpp", report, md)
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
