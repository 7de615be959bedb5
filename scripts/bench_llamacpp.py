"""llama.cpp as a target runtime (#53): on held-out code and chat prompts and on copy-heavy ones
(code edits, quoted answers, rewrites; chat template), interleaved per prompt: the product's defaults
(a Session on `auto`: where `omnidraft pair` kept llama.cpp and the program is exported, each
generation runs on the runtime predicted to end it first, pairs/routing.py), the pair verifying
on the target's GGUF with llama.cpp and verifying on the ExecuTorch program (each a Session, the
cost model choosing k and copies), llama.cpp alone on the same GGUF (its own generation loop), the
program alone, and transformers' assisted generation at its best setting. Prefill included,
greedy. Which runtime the product's defaults run (`auto`) is what `omnidraft pair` measured and
kept for this machine (run it first). Then the exactness report: each llama.cpp-runtime output
against llama.cpp's own one-token-at-a-time greedy output of the same prompt (identical or not,
where the first difference falls, and the top-2 logit margin there).

  omnidraft pair --target qwen2.5-coder-1.5b && python scripts/bench_llamacpp.py --target qwen2.5-coder-1.5b
Writes bench/results/llamacpp-<stamp>.{json,md}.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


AUTO = "the product (auto)"


def targets(session) -> list:
    """The target models a Session may run (both, where it routes generations)."""
    return [r.target.model for r in session.router.routes]


def one_token_at_a_time(lm, prompt_ids: list[int], n: int, stop: set[int]) -> tuple[list[int], list[float]]:
    """llama.cpp's own greedy output, one position per call, and the top-2 logit margin at each."""
    import torch

    row, ids, margins = lm.sync(prompt_ids).logits[0], [], []
    for _ in range(n):
        top = torch.topk(row, 2).values
        margins.append(round(float(top[0] - top[1]), 4))
        ids.append(int(row.argmax()))
        if ids[-1] in stop:
            break
        row = lm.extend([ids[-1]]).logits[0]
    return ids, margins


def forecast_row(metrics: dict) -> dict:
    """One routed generation: what routing predicted on the runtime it chose (and every runtime's
    predicted ms), and what it took."""
    f = metrics["forecast"]
    n, decode_s = metrics["new_tokens"], metrics["wall_s"] - metrics["prefill_s"]
    return {"runtime": metrics["target_runtime"], "work": metrics["work"], "tokens": n,
            "prefill_ms": [round(f["prefill_ms"], 1), round(metrics["prefill_s"] * 1e3, 1)],
            "decode_tokens_per_s": [round(f["tokens_per_s"], 2), round(n / max(decode_s, 1e-9), 2)],
            "drafts_tokens_per_s": round(f["drafts_tokens_per_s"], 3),
            "ms": [round(f["prefill_ms"] + n * 1e3 / f["tokens_per_s"], 1), round(metrics["wall_s"] * 1e3, 1)],
            "predicted_ms": metrics["predicted_ms"]}


def forecast_summary(rows: list[dict]) -> dict:
    """A set's routed generations summed, [predicted, measured] each, and the generation time's signed
    error (measured / predicted - 1: + is slower than predicted)."""
    total = lambda key, i: sum(r[key][i] for r in rows)  # noqa: E731
    tokens = sum(r["tokens"] for r in rows)
    speed = [tokens / max(sum(r["tokens"] / r["decode_tokens_per_s"][i] for r in rows), 1e-9) for i in (0, 1)]
    return {"prefill_ms": [round(total("prefill_ms", i)) for i in (0, 1)],
            "decode_tokens_per_s": [round(v, 2) for v in speed],
            "ms": [round(total("ms", i)) for i in (0, 1)],
            "generation_time_error": round(total("ms", 1) / max(total("ms", 0), 1e-9) - 1, 3)}


def forecast_lines(forecasts: dict[str, list[dict]]) -> list[str]:
    import benchio

    if not forecasts:
        return []
    rows = []
    for name, f in forecasts.items():
        t = forecast_summary(f)
        rows.append([name, ", ".join(sorted({r["work"] for r in f}))]
                    + [f"{t[k][0]} / {t[k][1]}" for k in ("prefill_ms", "decode_tokens_per_s", "ms")]
                    + [f"{t['generation_time_error']:+.0%}"])
    return ["The product's routing predictions against what its generations took on the runtime each chose (sums "
            "over the set; decoding is predicted from drafts, scaled by what the route's earlier generations of the "
            "same kind of work took against that prediction, copies included):", "",
            *benchio.table(["set", "kind of work", "prefill ms predicted / measured",
                            "decode tokens/s predicted / measured", "generation ms predicted / measured",
                            "generation time error"], rows)]


def main() -> int:
    from omnidraft.device.threads import configure_process

    configure_process()
    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, k=False, max_new_tokens=64)
    ap.add_argument("--code", type=int, default=4)
    ap.add_argument("--chat", type=int, default=4)
    ap.add_argument("--copy", type=int, default=4, help="copy-heavy prompts: edits, quotes, rewrites in turn")
    ap.add_argument("--no-transformers", action="store_true", help="skip transformers' assisted generation")
    args = ap.parse_args()
    benchsetup.start(args.threads)
    log = benchsetup.logger("llamacpp")

    from baselines import BEST, assisted_name, baselines
    from omnidraft import Runtime, Session
    from omnidraft.decode.generate import generate_ar
    from omnidraft.decode.text import encode_prompt, stop_ids
    from omnidraft.jobs.demo import copy_work
    from omnidraft.models.lm import same_start
    from omnidraft.device.cpu import cpu_info
    from omnidraft.pairs.runtime_choice import load, resolve
    from omnidraft.pairs.spec import pair_name

    sessions = {AUTO: Session(args.drafter, args.target, log=False),
                "pair on llama.cpp": Session(args.drafter, args.target, runtime=Runtime(target="llamacpp"), log=False),
                "pair on the program": Session(args.drafter, args.target, runtime=Runtime(target="executorch"),
                                               log=False)}
    auto = resolve(pair_name(args.drafter, args.target), "auto", exact=False)
    llama_lm = sessions["pair on llama.cpp"].target_model
    ttok = sessions["pair on llama.cpp"].target_tok
    stop = stop_ids(ttok, llama_lm.eos_ids)
    alone = {"program alone": sessions["pair on the program"].target}
    runs = baselines(args.target, args.drafter, args.threads, log, assisted=() if args.no_transformers else (BEST,))
    sets = {"code": [(p, False) for p, _ in benchsetup.prompt_mix(args.code, 0, code_start=40)],
            "chat": [(p, True) for p, _ in benchsetup.prompt_mix(0, args.chat, chat_start=12)],
            "copy-heavy": [(p, True) for p in copy_work(args.copy)]}
    sets = {name: prompts for name, prompts in sets.items() if prompts}  # --code 0 etc.: a set left out
    rows = list(sessions) + list(alone) + list(runs)
    tally = {s: {r: benchio.Tally() for r in rows} for s in sets}
    forwards = defaultdict(int)
    ran = defaultdict(lambda: defaultdict(int))  # (set, row) -> {target runtime: generations}
    exactness, predicted = [], {}
    forecasts = defaultdict(list)  # set -> the product's routed generations: predicted vs measured
    for name, prompts in sets.items():
        for i, (prompt, chat) in enumerate(prompts):
            log(f"{name} {i + 1}/{len(prompts)}")
            ids = encode_prompt(ttok, prompt, chat=chat)
            again = same_start(*{id(m): m for s in sessions.values() for m in targets(s)}.values(),
                               *(s.drafter for s in sessions.values()))
            order = rows[i % len(rows):] + rows[: i % len(rows)]  # which runs first rotates per prompt
            for row in order:
                again()
                if row in sessions:
                    s = sessions[row]
                    s.new_conversation()
                    got = s.generate(prompt, max_new_tokens=args.max_new_tokens, chat=chat)
                    tally[name][row].add(benchio.filled(got.metrics))
                    forwards[(name, row)] += got.metrics["target_forwards"]
                    ran[(name, row)][got.metrics["target_runtime"]] += 1
                    if "forecast" in got.metrics:  # a routed generation: its prediction against what it took
                        forecasts[name].append(forecast_row(got.metrics))
                    if row == "pair on llama.cpp":
                        llama_ids = got.token_ids
                elif row in alone:
                    got = generate_ar(alone[row], ttok, prompt, max_new_tokens=args.max_new_tokens, chat=chat)
                    tally[name][row].add(benchio.filled(got.metrics))
                else:
                    n, secs = runs[row](ids, args.max_new_tokens)
                    tally[name][row].add({"new_tokens": n, "wall_s": secs, "proposed": 0, "accepted": 0,
                                          "steps": n, "ngram_proposed": 0})
            again()
            own, margins = one_token_at_a_time(llama_lm, ids, args.max_new_tokens, stop)
            first = next((j for j, (a, b) in enumerate(zip(llama_ids, own)) if a != b),
                         None if len(llama_ids) == len(own) else min(len(llama_ids), len(own)))
            exactness.append({"set": name, "prompt": i, "identical": first is None, "first_difference": first,
                              "margin_there": margins[first] if first is not None and first < len(margins) else None})
        for row, s in sessions.items():
            state = s.draft_length.state()
            predicted[(name, row)] = state["predicted_tokens_per_s"] if state["k"] else state["target_alone_tokens_per_s"]

    cpu = cpu_info()
    cpu_line = benchio.cpu_line(cpu, args.threads)
    llama_row = "llama.cpp target alone"
    header = ["set"] + rows + [f"{r} / llama.cpp alone" for r in sessions] + [
        "tokens per target forward (" + ", ".join(sessions) + ")", f"{AUTO} ran on"]
    table = []
    for name in sets:
        t = tally[name]
        base = t[llama_row].tokens_per_s() if llama_row in t else None
        table.append([name] + [t[r].tokens_per_s() for r in rows]
                     + [f"{t[r].tokens_per_s() / base:.2f}x" if base else "" for r in sessions]
                     + [", ".join(f"{t[r].tokens / max(forwards[(name, r)], 1):.2f}" for r in sessions)]
                     + [", ".join(f"{rt} {n}" for rt, n in sorted(ran[(name, AUTO)].items()))])
    identical = sum(e["identical"] for e in exactness)
    report = benchio.stamp_report(drafter=args.drafter, target=args.target, cpu=cpu, threads=args.threads,
                                  max_new_tokens=args.max_new_tokens, auto_runtime=auto, runtime_choice=load(
                                      pair_name(args.drafter, args.target)),
                                  tokens_per_s={n: {r: tally[n][r].tokens_per_s() for r in rows} for n in sets},
                                  auto_ran_on={n: dict(ran[(n, AUTO)]) for n in sets},
                                  predicted_decode_tokens_per_s={f"{n} / {r}": v for (n, r), v in predicted.items()},
                                  exactness=exactness, forecasts=dict(forecasts),
                                  forecast_summary={n: forecast_summary(f) for n, f in forecasts.items()})
    md = [f"{args.drafter} -> {args.target}, greedy, up to {args.max_new_tokens} new tokens (an answer ends there or at its end), prefill included, interleaved "
          f"per prompt (rotating order). CPU: {cpu_line}. `auto` runs: **{auto}** (kept by `omnidraft pair`)"
          + (", each generation routed to the program or llama.cpp (pairs/routing.py)." if sessions[AUTO].router.routed
             else "."),
          "", "Tokens/s:", "", *benchio.table(header, table), "",
          f"Exactness of the pair on llama.cpp against llama.cpp's own one-token-at-a-time greedy output: "
          f"**{identical}/{len(exactness)}** identical; first differences (token, top-2 margin there): "
          + (", ".join(f"{e['set']}#{e['prompt']} at {e['first_difference']} ({e['margin_there']})"
                       for e in exactness if not e["identical"]) or "none"),
          "", *forecast_lines(forecasts),
          "", f"transformers row: {assisted_name(BEST)}." if not args.no_transformers else ""]
    benchio.save(args.out, "llamacpp", "llama.cpp as a target runtime", report, md)
    for s in sessions.values():
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
