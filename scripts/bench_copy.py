"""Proposals from the context (#40): on copy-heavy prompts (omnidraft/copy_prompts.py: code edits,
quoted answers, rewrites, follow-up turns) and on the code and chat sets, the ExecuTorch target
alone, the pair with the product's defaults (the cost model mixing copies from the context with
the drafter's drafts, decode/draft_length.py) and the same pair without copies, interleaved per
prompt; then, on the same prompt ids, llama.cpp plain and with its prompt-lookup draft model
(llama-cpp-python's LlamaPromptLookupDecoding), and transformers plain, with prompt-lookup
decoding (prompt_lookup_num_tokens=10) and its assisted generation at its best setting.

Greedy. A follow-up conversation's earlier answer is the target's own greedy answer, in the
measured prompt (the target's chat template over the whole conversation) for every row alike.
Before the rows, the cost model is measured and the drafter's acceptance calibrated on other
prompts (as `omnidraft pair` does); each pair row then starts from that calibration. The
ExecuTorch rows of a prompt run in an order that rotates from prompt to prompt, each from the
caches the previous prompt left (models/lm.py same_start: its chat template's system prompt, as
llama.cpp's next call finds it; transformers keeps nothing).

  python scripts/bench_copy.py --target qwen2.5-coder-1.5b --code 8 --chat 8
Writes bench/results/copy-<stamp>.{json,md}.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    from omnidraft.device.threads import configure_process

    configure_process()
    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, dtype="--dtype", k=False,
                           dtype_help="the transformers target's dtype (fp32 where the CPU has no bf16 arithmetic)")
    ap.add_argument("--code", type=int, default=8)
    ap.add_argument("--chat", type=int, default=8)
    ap.add_argument("--copy", type=int, default=24, help="copy-heavy conversations (of 24)")
    ap.add_argument("--calibrate", type=int, default=4, help="calibration prompts (half code, half chat)")
    ap.add_argument("--quant", default="8da8w", help="the target program's scheme")
    ap.add_argument("--no-baselines", action="store_true", help="skip llama.cpp and transformers")
    ap.add_argument("--no-transformers-lookup", action="store_true",
                    help="skip transformers alone and with prompt lookup (~60%% of a 1.5B run on 2 cores); "
                         "its assisted generation at its best setting stays")
    args = ap.parse_args()
    args.max_new_tokens = 96 if "--max-new-tokens" not in sys.argv else args.max_new_tokens
    benchsetup.start(args.threads)
    log = benchsetup.logger("copy")

    from omnidraft.copy_prompts import copy_prompts
    from omnidraft.decode.draft_length import CostModelK
    from omnidraft.decode.generate import generate_ar, generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.lm import common_prefix, same_start
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.build import load_drafter, local_target
    from omnidraft.device.cpu import cpu_info
    from omnidraft.pairs.timing import WIDTHS, measure
    from omnidraft.propose.config import SpecConfig
    from omnidraft.propose.lookup import LookupConfig
    from omnidraft.translate.state import PairState

    drafter = load_drafter(args.drafter, "executorch")
    target = local_target(args.target, "executorch", quant=args.quant)
    verifier = LocalTarget(target)  # greedy
    dtok, ttok = load_tokenizer(args.drafter), load_tokenizer(args.target)
    pair = PairState(dtok, ttok, drafter.vocab_size, target.vocab_size)
    model = measure(target, drafter, WIDTHS, progress=log)
    calibrated = CostModelK(model)
    half = args.calibrate // 2
    with calibrated.fixed(5):
        for p, chat in benchsetup.prompt_mix(half, args.calibrate - half, code_start=40, chat_start=12):
            generate_speculative(drafter, verifier, pair, p, cfg=SpecConfig("omnidraft"), k=calibrated,
                                 max_new_tokens=args.max_new_tokens, chat=chat)
    calibrated.reestimate()
    log(f"calibrated: {calibrated.state()}")

    def conversation(turns: list[str]) -> str:
        """The measured prompt: the target's chat template over the conversation, earlier answers
        the target's own greedy ones."""
        messages = []
        for turn in turns[:-1]:
            messages.append({"role": "user", "content": turn})
            answer = generate_ar(verifier, ttok, turn, max_new_tokens=args.max_new_tokens, chat=True)
            messages.append({"role": "assistant", "content": answer.text})
        messages.append({"role": "user", "content": turns[-1]})
        return ttok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    sets = {"copy": [(conversation(t), False) for t in copy_prompts()[: args.copy]],
            "code": benchsetup.prompt_mix(args.code, 0), "chat": benchsetup.prompt_mix(0, args.chat)}
    runs = {"pair (product: copies + drafts)": LookupConfig(), "pair without copies": None}
    baselines = {} if args.no_baselines else _baselines(args.target, args.drafter, args.threads, args.dtype, log,
                                                          lookup=not args.no_transformers_lookup)
    report = benchio.stamp_report(cpu=cpu_info(), cost=model.to_dict(), calibrated=calibrated.state(),
                                  max_new_tokens=args.max_new_tokens, sets={})
    for name, cases in sets.items():
        if not cases:  # --code 0 / --chat 0
            continue
        lengths = {r: copy.deepcopy(calibrated) for r in runs}  # each row learns its own copies' acceptance
        alone = {"tokens": 0, "s": 0.0, "prefill_s": 0.0}
        rows = {r: {"tokens": 0, "s": 0.0, "prefill_s": 0.0, "forwards": 0, "equal": 0, "kinds": {}} for r in runs}
        base = {b: {"tokens": 0, "s": 0.0} for b in baselines}
        executorch_rows = ["alone", *runs]
        cached = 0  # prompt ids the target's cache held at each prompt (the template's prefix)
        for i, (text, chat) in enumerate(cases):
            again = same_start(target, drafter)  # every run finds what the first found
            ids = encode_prompt(ttok, text, chat=chat)
            cached += common_prefix(target.tokens, ids)
            turn = i % len(executorch_rows)  # the rows in an order that rotates per prompt: none always first
            got = {}
            for r in executorch_rows[turn:] + executorch_rows[:turn]:
                again()
                got[r] = (generate_ar(verifier, ttok, text, max_new_tokens=args.max_new_tokens, chat=chat)
                          if r == "alone" else
                          generate_speculative(drafter, verifier, pair, text, cfg=SpecConfig("omnidraft"),
                                               k=lengths[r], max_new_tokens=args.max_new_tokens, chat=chat,
                                               lookup=runs[r]))
            ref = got["alone"]
            alone["tokens"] += ref.metrics["new_tokens"]
            alone["s"] += ref.metrics["wall_s"]
            alone["prefill_s"] += ref.metrics["prefill_s"]
            for r in runs:
                row, m = rows[r], got[r].metrics
                row["tokens"] += m["new_tokens"]
                row["s"] += m["wall_s"]
                row["prefill_s"] += m["prefill_s"]
                row["forwards"] += m["target_forwards"]
                row["equal"] += got[r].token_ids == ref.token_ids
                for kind, c in m["rounds_by_kind"].items():
                    mine = row["kinds"].setdefault(kind, {"rounds": 0, "proposed": 0, "accepted": 0})
                    for key in mine:
                        mine[key] += c[key]
            for b, run in baselines.items():
                n, secs = run(ids, args.max_new_tokens)
                base[b]["tokens"] += n
                base[b]["s"] += secs
            log(f"{name} {i + 1}/{len(cases)}: alone {ref.metrics['tokens_per_s']:.1f} tokens/s, product "
                f"{rows[next(iter(runs))]['tokens'] / max(rows[next(iter(runs))]['s'], 1e-9):.1f} so far")
        speed = lambda t: round(t["tokens"] / max(t["s"], 1e-9), 3)  # noqa: E731
        # after the prefill (the same work in every ExecuTorch row, which no proposal shortens)
        decode = lambda t: round(t["tokens"] / max(t["s"] - t["prefill_s"], 1e-9), 3)  # noqa: E731
        report["sets"][name] = {
            "prompts": len(cases), "executorch target alone": speed(alone),
            "prefill_share_alone": round(alone["prefill_s"] / max(alone["s"], 1e-9), 3),
            "cached_prompt_ids_mean": round(cached / len(cases), 1),
            "decode_tokens_per_s_alone": decode(alone),
            "rows": {r: {"tokens_per_s": speed(row), "vs_alone": round(speed(row) / speed(alone), 3),
                         "decode_vs_alone": round(decode(row) / decode(alone), 3),
                         "tokens_per_target_forward": round(row["tokens"] / max(row["forwards"], 1), 3),
                         "equal_to_alone": row["equal"], "rounds_by_kind": row["kinds"]}
                     for r, row in rows.items()},
            "baselines": {b: speed(t) for b, t in base.items()}}
    benchio.save(args.out, "copy", "Proposals from the context: copy-heavy, code and chat prompts",
                 report, _markdown(report, args))
    return 0


def _baselines(target: str, drafter: str, threads: int, dtype: str, log, lookup: bool = True) -> dict:
    """name -> run(ids, new) -> (tokens, seconds): llama.cpp plain and with prompt lookup (when
    llama-cpp-python is installed), transformers' assisted generation at its best setting
    (baselines.py) and, with ``lookup``, transformers (the target in ``dtype``) plain and with
    prompt lookup."""
    import torch

    from baselines import BEST, assisted_name, baselines
    from omnidraft.decode.text import generation_eos_ids
    from omnidraft.models.catalog import ensure_gguf
    from omnidraft.models.loading import load_model

    hf = load_model(target, dtype=dtype).model
    runs = baselines(target, drafter, threads, log, assisted=(BEST,), dtype=dtype, target_hf=hf)
    runs = {k: runs[k] for k in runs if k in ("llama.cpp target alone", assisted_name(BEST, dtype))}
    try:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        llm = Llama(model_path=str(ensure_gguf(target, progress=log)), n_ctx=2048, n_threads=threads,
                    n_threads_batch=threads, verbose=False,
                    draft_model=LlamaPromptLookupDecoding(max_ngram_size=3, num_pred_tokens=10))
        stop = {llm.token_eos()}

        def llama_lookup(ids, new):
            t0, n = time.perf_counter(), 0
            try:
                for tok in llm.generate(ids, top_k=1, temp=0.0, reset=True):
                    n += 1
                    if tok in stop or n >= new:
                        break
            except ValueError as err:  # its scores buffer fails on some prompts (LLAMACPP.md)
                log(f"llama.cpp prompt lookup failed on a prompt: {err}")
            return n, time.perf_counter() - t0

        runs["llama.cpp prompt lookup (LlamaPromptLookupDecoding, 3 / 10)"] = llama_lookup
    except ImportError:
        pass
    eos = sorted(generation_eos_ids(hf.generation_config))

    def transformers(lookup):
        def run(ids, new):
            x = torch.tensor([ids])
            t0 = time.perf_counter()
            out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new, do_sample=False,
                              eos_token_id=eos, pad_token_id=eos[0],
                              **({"prompt_lookup_num_tokens": 10} if lookup else {}))
            return out.shape[1] - len(ids), time.perf_counter() - t0
        return run

    if lookup:
        runs[f"transformers target alone ({dtype})"] = transformers(False)
        runs[f"transformers prompt lookup ({dtype}, 10 tokens)"] = transformers(True)
    return runs


def _markdown(report: dict, args) -> list[str]:
    import benchio

    cpu = report["cpu"]
    md = [f"CPU: {cpu['model']}, {cpu['cores']} cores, flags {' '.join(cpu['flags'])}; {args.threads} threads. "
          f"Drafter {args.drafter} (ExecuTorch 8da8w), target {args.target} (ExecuTorch {args.quant}); greedy, "
          f"{args.max_new_tokens} new tokens, tokens/s over the whole generation (prefill included), every row "
          "on the same prompts, interleaved per prompt (the ExecuTorch rows in a rotating order, each finding the "
          "caches the previous prompt left: ids cached per prompt, mean, "
          + ", ".join(f"{n} {s['cached_prompt_ids_mean']}" for n, s in report["sets"].items())
          + "; llama.cpp keeps its cached prefix the same way).", "",
          f"Cost model: v(n) ms {report['cost']['verify_ms']}; drafter {report['cost']['drafter_ms']} ms/token; "
          f"calibrated drafter acceptance by position {report['calibrated']['position_acceptance']} "
          f"(k = {report['calibrated']['k']}).", ""]
    rows = []
    for name, s in report["sets"].items():
        alone = s["executorch target alone"]
        rows.append([f"{name} ({s['prompts']})", "ExecuTorch target alone", alone, "1.00x",
                     f"1.00x (prefill {s['prefill_share_alone']:.0%} of its time)", "1.00", "", "", ""])
        for r, row in s["rows"].items():
            kinds = row["rounds_by_kind"]
            rounds = sum(k["rounds"] for k in kinds.values())
            acc = sum(k["accepted"] for k in kinds.values())
            share = lambda kind, key, total: (f"{kinds.get(kind, {}).get(key, 0) / total:.0%}"  # noqa: E731
                                              if total else "-")
            rows.append([f"{name} ({s['prompts']})", r, row["tokens_per_s"], f"{row['vs_alone']:.2f}x",
                         f"{row['decode_vs_alone']:.2f}x", row["tokens_per_target_forward"],
                         f"lookup {share('lookup', 'rounds', rounds)}, drafter {share('drafter', 'rounds', rounds)}",
                         f"lookup {share('lookup', 'accepted', acc)}, drafter {share('drafter', 'accepted', acc)}",
                         f"{row['equal_to_alone']}/{s['prompts']}"])
        for b, v in s["baselines"].items():
            rows.append([f"{name} ({s['prompts']})", b, v, f"{v / alone:.2f}x", "", "", "", "", ""])
    md += benchio.table(["prompts", "run", "tok/s", "vs ExecuTorch target alone", "the same after the prefill",
                         "tokens / target forward",
                         "share of rounds", "share of accepted tokens", "output == alone"], rows)
    md += ["", "Each engine's speculation against its own plain generation, same run:", ""]
    ratio = lambda s, a, b: (f"{s['baselines'][a] / s['baselines'][b]:.2f}x"  # noqa: E731
                             if a in s["baselines"] and b in s["baselines"] else "not run")
    md += benchio.table(["prompts", "OmniDraft product / ExecuTorch target alone",
                         "llama.cpp prompt lookup / llama.cpp alone", "transformers prompt lookup / transformers alone"],
                        [[name, f"{s['rows'][next(iter(s['rows']))]['vs_alone']:.2f}x",
                          ratio(s, next((b for b in s["baselines"] if b.startswith("llama.cpp prompt")), ""),
                                "llama.cpp target alone"),
                          ratio(s, f"transformers prompt lookup ({args.dtype}, 10 tokens)",
                                f"transformers target alone ({args.dtype})")]
                         for name, s in report["sets"].items()])
    return md


if __name__ == "__main__":
    sys.exit(main())
