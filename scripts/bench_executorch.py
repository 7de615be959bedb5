"""Benchmark: the drafter as an ExecuTorch program (XNNPACK) vs eager PyTorch.

1. Drafter ms/token (median over a greedy decode after a prompt prefill), eager fp32 vs the
   .pte in fp32 / 8da8w / 8da4w, for SmolLM2-135M (real weights) and the Llama-68M shape
   (random weights: speed only). Quantised programs: greedy agreement with the fp32 program.
2. End to end on the real pair (SmolLM2-135M -> --target, greedy, omnidraft, fixed k): acceptance,
   tokens/s and output equality with the target alone, per drafter runtime, interleaved per prompt.
Missing programs are exported first (export time reported). Writes bench/results/executorch-<date>.*
Example:
  python scripts/bench_executorch.py --target qwen2.5-coder-0.5b --prompts 8 --threads 2
"""

from __future__ import annotations

import math
import statistics
import sys
import time

from benchio import Tally, save, stamp_report, table
from benchsetup import Models, load, logger, parser, start

QUANTS = ("fp32", "8da8w", "8da4w")
LLAMA_68M = dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=2,
                 num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=2048,
                 tie_word_embeddings=False)


def ensure_program(name: str, quant: str, max_seq: int, make_lm, log, delegate_adapter: bool = True) -> tuple:
    """The exported program (exported now if missing or made by an older format)."""
    from omnidraft.errors import OmniDraftError
    from omnidraft.export.layout import program_dir
    from omnidraft.export.info import ProgramInfo
    from omnidraft.export.lower import ExportConfig, export_drafter

    d = program_dir(name + ("" if delegate_adapter else "-portable-lora"), quant, max_seq)
    try:
        return d, ProgramInfo.load(d / "program.json")
    except OmniDraftError:
        export_drafter(make_lm(), d, ExportConfig(drafter=name, quant=quant, max_seq=max_seq,
                                                  delegate_adapter=delegate_adapter), log=log)
    return d, ProgramInfo.load(d / "program.json")


def decode_ms(lm, prompt: list[int], n: int, forced: list[int] | None = None) -> tuple[list[int], float]:
    """Decode n tokens one at a time after prefilling ``prompt``: greedy, or teacher-forced on
    ``forced``. Returns (the runtime's argmax at each step, median ms per decode step)."""
    out = lm.prefill(prompt)
    preds, times = [], []
    for i in range(n):
        preds.append(int(out.logits[-1].argmax()))
        t = forced[i] if forced is not None else preds[-1]
        t0 = time.perf_counter()
        out = lm.extend([t], last_only=True)
        times.append((time.perf_counter() - t0) * 1e3)
    return preds, statistics.median(times)


def main(argv=None) -> int:
    ap = parser(__doc__, prompts=8)
    ap.add_argument("--decode-tokens", type=int, default=48, help="tokens per ms/token measurement")
    ap.add_argument("--max-seq", type=int, default=1024)
    ap.add_argument("--quants", nargs="+", default=list(QUANTS))
    ap.add_argument("--no-e2e", action="store_true")
    ap.add_argument("--lora-ablation", action="store_true", help="also time each quantised program "
                    "exported with its LoRA ops outside XNNPACK (portable kernels), the older layout")
    ap.add_argument("--shapes", nargs="+", default=["drafter", "llama-68m-shape"],
                    help="which drafters to time: 'drafter' (--drafter) and/or llama-68m-shape")
    args = ap.parse_args(argv)

    import torch
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from transformers import LlamaConfig, LlamaForCausalLM

    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_ar, generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.models.loading import load_model, load_tokenizer
    from omnidraft.prompts import humaneval
    from omnidraft.models.eager import CausalLM
    from omnidraft.propose.config import SpecConfig

    start(args.threads)
    _unsafe_reset_threadpool(args.threads)  # XNNPACK's pool: the same thread count as torch
    log = logger()
    prompts = humaneval(limit=args.prompts)
    dtok = load_tokenizer(args.drafter)
    report = stamp_report(drafter=args.drafter, target=args.target, target_dtype=args.target_dtype,
                          k=args.k, prompts=len(prompts), max_new_tokens=args.max_new_tokens,
                          max_seq=args.max_seq, decode_tokens=args.decode_tokens, programs=[],
                          per_token=[], end_to_end=[])
    try:
        from importlib.metadata import version

        report["versions"]["executorch"] = version("executorch")
        report["versions"]["torchao"] = version("torchao")
    except Exception:  # noqa: BLE001
        pass

    shapes = {}
    if "drafter" in args.shapes:
        shapes[args.drafter] = lambda: load_model(args.drafter, dtype="fp32").model

    def llama68m():
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(**LLAMA_68M)).eval()

    if "llama-68m-shape" in args.shapes:
        shapes["llama-68m-shape"] = llama68m
    runtimes: dict[str, dict] = {}
    for name, make in shapes.items():
        eager = CausalLM(make(), name=name)
        vocab = eager.vocab_size
        if name == args.drafter:
            test = [dtok(p)["input_ids"][-64:] for p in prompts[:4]]
        else:
            g = torch.Generator().manual_seed(0)
            test = [torch.randint(0, vocab, (64,), generator=g).tolist() for _ in range(4)]
        rows = {"eager fp32": eager}
        for q in args.quants:
            d, info = ensure_program(name, q, args.max_seq, make, log)
            report["programs"].append({"drafter": name, "quant": q, "dir": str(d), "pte_mib":
                                       round(info.pte_bytes / 2**20, 1), "export_s": info.export_seconds,
                                       "program_id": info.program_id})
            if args.lora_ablation and q != "fp32":
                dq, _ = ensure_program(name, q, args.max_seq, make, log, delegate_adapter=False)
                rows[f"executorch {q}, LoRA outside XNNPACK"] = ExecuTorchLM(dq, name=name)
            rows[f"executorch {q}"] = lm = ExecuTorchLM(d, name=name)
            swaps = []
            for _ in range(3):
                t0 = time.perf_counter()
                lm.load_adapter(d / "base.ptd")  # what a hot-swap to another target's .ptd costs
                swaps.append(time.perf_counter() - t0)
            report["programs"][-1]["adapter_swap_ms"] = round(statistics.median(swaps) * 1e3, 1)
            report["programs"][-1]["adapter_ptd_mib_trained"] = round(
                sum(4 * math.prod(v[0]) for v in info.adapter_keys.values()) / 2**20, 1)
        ms = {r: [] for r in rows}
        toks = {r: [] for r in rows}
        for p in test:  # interleaved per prompt, so machine load hits every runtime alike
            forced = None
            for r, lm in rows.items():  # eager first: its greedy tokens are everyone's input
                t, m = decode_ms(lm, p, args.decode_tokens, forced)
                forced = forced or t
                ms[r].append(m)
                toks[r].append(t)
        for r in rows:
            agree = sum(sum(a == b for a, b in zip(x, y)) for x, y in zip(toks[r], toks["eager fp32"]))
            row = {"drafter": name, "runtime": r, "ms_per_token": round(statistics.median(ms[r]), 2),
                   "top1_agreement_vs_eager": round(agree / sum(map(len, toks["eager fp32"])), 4)}
            report["per_token"].append(row)
            log(str(row))
        base = next(x["ms_per_token"] for x in report["per_token"] if x["drafter"] == name and x["runtime"] == "eager fp32")
        for x in report["per_token"]:
            if x["drafter"] == name:
                x["speedup_vs_eager"] = round(base / x["ms_per_token"], 2)
        if name == args.drafter:
            runtimes = {r: lm for r, lm in rows.items()}
        del rows

    if not args.no_e2e and runtimes:
        ttok, target = load(args.target, args.target_dtype)
        # one PairState per runtime: each learns its own n-grams online, as a device would
        models = Models(dtok, runtimes["eager fp32"], ttok, target)
        pairs = {r: models.pair() for r in runtimes}
        verifier, cfg, k = LocalTarget(target), SpecConfig("omnidraft"), FixedK(args.k)  # greedy
        tot = {r: Tally() for r in ["ar", *runtimes]}
        for i, p in enumerate(prompts):
            ref = generate_ar(verifier, ttok, p, max_new_tokens=args.max_new_tokens)
            tot["ar"].add(ref.metrics, equal=True)
            for r, lm in runtimes.items():
                res = generate_speculative(lm, verifier, pairs[r], p, cfg=cfg, k=k, max_new_tokens=args.max_new_tokens)
                tot[r].add(res.metrics, equal=res.token_ids == ref.token_ids)
            log(f"prompt {i + 1}/{len(prompts)} done")
        ar_tps = tot["ar"].tokens / tot["ar"].wall
        for r, t in tot.items():  # ar drafts nothing: no acceptance
            tps = t.tokens / t.wall
            report["end_to_end"].append({
                "drafter_runtime": r, "acceptance_rate": t.acceptance_rate() if r != "ar" and t.proposed else None,
                "tokens_per_s": round(tps, 3), "speedup_vs_ar": round(tps / ar_tps, 3),
                "equal_to_ar": f"{t.equal}/{len(prompts)}"})
    md = [f"`{report['command']}`", "",
          f"{args.threads} threads (torch and XNNPACK), batch 1, one token per step after a 64-token "
          f"prefill, median of {args.decode_tokens} steps x 4 prompts; static cache {args.max_seq}. "
          "Every runtime is fed eager fp32's greedy continuation; top-1 agreement = how often its "
          "argmax equals eager's at the same step (random weights for the Llama-68M shape).", ""]
    md += table(["drafter", "runtime", "ms/token", "vs eager", "top-1 agreement vs eager"],
                [[x["drafter"], x["runtime"], x["ms_per_token"], f"{x['speedup_vs_eager']}x",
                  x["top1_agreement_vs_eager"]] for x in report["per_token"]])
    md += [""] + table(["program", ".pte MiB", "adapter .ptd MiB (LoRA r=32 + head)", "adapter swap ms", "export s"],
                       [[f"{p['drafter']} {p['quant']}", p["pte_mib"], p["adapter_ptd_mib_trained"],
                         p["adapter_swap_ms"], p["export_s"]] for p in report["programs"]])
    if report["end_to_end"]:
        md += ["", f"End to end: {args.drafter} -> {args.target} ({args.target_dtype}), greedy, omnidraft "
               f"k={args.k}, {len(prompts)} HumanEval prompts, {args.max_new_tokens} new tokens.", ""]
        md += table(["drafter runtime", "acceptance", "tokens/s", "speedup vs ar", "output == ar"],
                    [[x["drafter_runtime"], x["acceptance_rate"], x["tokens_per_s"], f"{x['speedup_vs_ar']}x",
                      x["equal_to_ar"]] for x in report["end_to_end"]])
    save(args.out, "executorch", "ExecuTorch drafter benchmark", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
