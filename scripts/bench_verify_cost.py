"""Verification cost curves v(n) (#23): milliseconds for one call of n tokens that returns every
position's logits, per target runtime on this CPU, and the drafter's cost per token.

Runtimes per target: the ExecuTorch target program (`omnidraft export --target`) as shipped
(batch-invariant attention, MKL kept out of ExecuTorch's thread pool: device/threads.py); with
``--before-src``, that checkout's program as it ran before #23 (a child process that imports
torch first and calls it bare) and with its MKL guard (custom_sdpa attention), and the shipped
program once more in a child process of its own (the same conditions as those two);
transformers bf16 and fp32; llama.cpp (llama-cpp-python, the packaged GGUF, `eval` with
logits_all) when the optional `bench` extra is built. Every runtime times the same widths, after
the same 64 cached tokens, with the cache rolled back after each call (pairs/cost.py
``time_calls``); rounds alternate the runtimes so machine load hits each alike.

  python scripts/bench_verify_cost.py --targets qwen2.5-coder-0.5b --widths 1,2,3,4,5,6,8,12,16
Writes bench/results/verify-cost-<stamp>.{json,md,png}.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
from contextlib import nullcontext
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _worker(prog: str, widths: list[int], reps: int, threads: int, mode: str) -> None:
    """Child process on the code of ``--before-src`` (a checkout from before this change, first on
    PYTHONPATH): ``bare`` times the program as it ran before #23 (torch first, no MKL guard),
    ``guarded`` with that checkout's MKL guard."""
    import torch  # noqa: F401 - loaded before omnidraft: MKL keeps its per-thread teams

    from omnidraft.device import runtime, threads as th
    from omnidraft.pairs.timing import time_calls

    th.set_program_threads(threads)
    torch.set_num_threads(threads)
    if mode == "bare":
        runtime.program_call = nullcontext  # the call exactly as before #23
    lm = runtime.ExecuTorchLM(prog)
    print(json.dumps({w: time_calls(lm, w, reps) for w in widths}))


class LlamaCpp:
    """llama-cpp-python on a GGUF behind the two calls time_calls makes (extend, rollback)."""

    def __init__(self, path: str, threads: int, n_ctx: int = 1024):
        from llama_cpp import Llama

        self.llm = Llama(model_path=path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                         logits_all=True, verbose=False)
        self.name, self.max_length, self.vocab_size = Path(path).name, n_ctx, self.llm.n_vocab()

    def prefill(self, ids):
        self.llm.reset()
        self.llm.eval(ids)

    def extend(self, ids, last_only=False):
        self.llm.eval(ids)  # logits of every position land in llm.scores

    def rollback(self, n):
        self.llm.n_tokens -= n  # the next eval drops the cache entries past n_tokens


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], [int(w) for w in sys.argv[3].split(",")], int(sys.argv[4]), int(sys.argv[5]),
                sys.argv[6])
        return 0
    from omnidraft.device.threads import configure_process

    configure_process()
    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, target=None, dtype="--dtype", k=False)
    ap.add_argument("--targets", default="qwen2.5-coder-0.5b")
    ap.add_argument("--widths", default="1,2,3,4,5,6,8,12,16")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quants", default="8da8w,8da4w", help="target program schemes")
    ap.add_argument("--before-src", help="a checkout of the code before the change (e.g. `git worktree add "
                    "/tmp/before bd9b91f`): its programs time as before #23 and with its MKL guard")
    ap.add_argument("--before-programs", help="the folder holding that code's target programs "
                    "(default: this home's)")
    ap.add_argument("--no-eager", action="store_true", help="skip transformers (slow on AVX2 CPUs)")
    ap.add_argument("--agreement-prompts", type=int, default=6, help="prompts for top-1 agreement with fp32")
    args = ap.parse_args()
    benchsetup.start(args.threads)
    log = benchsetup.logger("verify-cost")
    from omnidraft.export.layout import program_dir
    from omnidraft.models.catalog import ensure_gguf
    from omnidraft.pairs.build import load_drafter, local_target
    from omnidraft.device.cpu import cpu_info
    from omnidraft.pairs.timing import time_calls

    widths = [int(w) for w in args.widths.split(",")]
    cpu = cpu_info()
    report = benchio.stamp_report(cpu=cpu, widths=widths, reps=args.reps, rounds=args.rounds, targets={})
    for name in args.targets.split(","):
        quants = args.quants.split(",")
        prog = program_dir(name, quants[0], 1024, role="target")
        runtimes = {f"executorch {q}": local_target(name, "executorch", quant=q) for q in quants
                    if (program_dir(name, q, 1024, role="target") / "program.pte").is_file()}
        if not args.no_eager:
            runtimes["transformers bf16"] = local_target(name, "eager", dtype="bf16")
            runtimes["transformers fp32"] = local_target(name, "eager", dtype="fp32")
        gguf = ensure_gguf(name, progress=log)
        try:
            runtimes[f"llama.cpp ({Path(gguf).stat().st_size / 2**20:.0f} MiB GGUF)"] = LlamaCpp(str(gguf), args.threads)
        except ImportError:
            log("llama-cpp-python is not installed (pip install -e '.[llamacpp]'): no llama.cpp row")
            report.setdefault("absent", []).append("llama.cpp")
        old = Path(args.before_programs) / prog.name if args.before_programs else prog
        # (row, program, code on PYTHONPATH, mode): each in a child process of its own, so the
        # shipped program is also timed the way the checkout's are (a process holding one program)
        workers = [(f"executorch {quants[0]} before #23", old, args.before_src, "bare"),
                   (f"executorch {quants[0]} custom_sdpa + MKL guard", old, args.before_src, "guarded"),
                   (f"executorch {quants[0]} (child process)", prog, "", "guarded")] if args.before_src else []
        samples: dict[str, dict[int, list[float]]] = {r: {w: [] for w in widths}
                                                      for r in [*(w[0] for w in workers), *runtimes]}
        for rnd in range(args.rounds):
            for row, program, src, mode in workers:
                out = subprocess.run([sys.executable, __file__, "--worker", str(program), args.widths, str(args.reps),
                                      str(args.threads), mode], capture_output=True, text=True, check=True,
                                     env={**os.environ, "PYTHONPATH": src})
                for w, ms in json.loads(out.stdout.strip().splitlines()[-1]).items():
                    samples[row][int(w)].append(ms)
            for w in widths:
                for r, lm in runtimes.items():
                    samples[r][w].append(time_calls(lm, w, args.reps))
            log(f"{name}: round {rnd + 1}/{args.rounds}: " + ", ".join(
                f"{r} v(4)={statistics.median(s[4]) if 4 in s else 0:.1f}" for r, s in samples.items()))
        report["targets"][name] = {r: {w: round(statistics.median(v), 2) for w, v in s.items()}
                                   for r, s in samples.items()}
        report.setdefault("agreement", {})[name] = _agreement(name, runtimes, args.agreement_prompts,
                                                              args.max_new_tokens, log)
    drafter = {}
    for runtime in ("executorch", "eager"):
        lm = load_drafter(args.drafter, runtime)
        drafter[f"{args.drafter} {'executorch 8da8w' if runtime == 'executorch' else 'transformers fp32'}"] = \
            round(statistics.median(time_calls(lm, 1, args.reps) for _ in range(args.rounds)), 2)
    report["drafter_ms_per_token"] = drafter
    md = [f"Native bf16 on this CPU: {'yes' if cpu['native_bf16'] else 'no'}. Median ms of one "
          f"call of n tokens returning every position's logits, after 64 cached tokens "
          f"({args.rounds} rounds x {args.reps} calls, runtimes alternating).", ""]
    for name, rows in report["targets"].items():
        md += [f"## {name}", ""]
        agree = report["agreement"][name]
        md += benchio.table(["runtime", *[f"v({w})" for w in widths], "v(4)/v(1)", "max v(2..8) / v(16)",
                             "tokens/s alone", "top-1 vs fp32"],
                            [[r, *[v[w] for w in widths], _ratio(v, 4, 1), _worst(v), round(1e3 / v[widths[0]], 1),
                              agree.get(r, "")] for r, v in rows.items()])
        md.append("")
    md += ["## drafter, ms per token", ""] + benchio.table(["drafter", "ms"], drafter.items())
    if report.get("absent"):
        md += ["", f"Absent here: {', '.join(report['absent'])} (optional extra not installed)."]
    stem = benchio.save(args.out, "verify-cost", "Verification cost v(n) by runtime", report, md)
    _plot(report, stem.with_suffix(".png"))
    return 0


def _agreement(name: str, runtimes: dict, prompts: int, new_tokens: int, log) -> dict:
    """Top-1 agreement of each runtime with fp32 transformers, teacher-forced on fp32's greedy
    continuation of HumanEval and chat prompts (one call of prompt + continuation each)."""
    import benchsetup
    import torch

    from omnidraft.decode.generate import generate_ar
    from omnidraft.decode.target import LocalTarget
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.build import local_target

    tok = load_tokenizer(name)
    ref = LocalTarget(runtimes.get("transformers fp32") or local_target(name, "eager", dtype="fp32"))  # greedy
    hits: dict[str, list[int]] = {r: [0, 0] for r in runtimes if r != "transformers fp32"}
    for p, chat in benchsetup.prompt_mix(prompts - prompts // 2, prompts // 2):
        ids = encode_prompt(tok, p, chat=chat)
        cont = generate_ar(ref, tok, p, max_new_tokens=new_tokens, chat=chat).token_ids
        for r in hits:
            lm = runtimes[r]
            if isinstance(lm, LlamaCpp):
                lm.prefill(ids + cont)
                rows = torch.tensor(lm.llm.scores[len(ids) - 1: len(ids) + len(cont) - 1])
            else:
                lm.reset()
                rows = lm.extend(ids + cont).logits[len(ids) - 1: len(ids) + len(cont) - 1]
            hits[r][0] += int((rows.argmax(-1) == torch.tensor(cont)).sum())
            hits[r][1] += len(cont)
    out = {r: round(h / max(n, 1), 4) for r, (h, n) in hits.items()}
    log(f"{name}: top-1 agreement with fp32 {out}")
    return out


def _ratio(v: dict, a: int, b: int):
    return round(v[a] / v[b], 2) if a in v and b in v else ""


def _worst(v: dict):
    small = [v[w] for w in v if 2 <= w <= 8]
    return round(max(small) / v[16], 2) if small and 16 in v else ""


def _plot(report: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no v(n) plot", file=sys.stderr)
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = report["targets"]
    fig, axes = plt.subplots(1, len(targets), figsize=(6.5 * len(targets), 4.5), squeeze=False)
    for ax, (name, rows) in zip(axes[0], targets.items()):
        for r, v in rows.items():
            ws = sorted(v)
            ax.plot(ws, [v[w] / v[ws[0]] for w in ws], marker="o", label=r)
        ax.set_title(f"{name}: v(n) / v(1)")
        ax.set_xlabel("tokens per call (n)")
        ax.set_ylabel("cost relative to one token")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    title = f"{report['cpu']['model']} ({' '.join(report['cpu']['flags'])})"
    fig.suptitle(textwrap.fill(title, 150), fontsize=8)  # the flags list runs past the figure's width
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
