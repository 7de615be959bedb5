"""One-token decoding before and after #23's batch-invariant attention (#23 must-show: no more
than 10% slower): greedy decoding of the ExecuTorch target program, one token per call, on
real code and chat prompts and on long contexts (three HumanEval prompts in one, past the
one-token method's window), the program as it was before the change (a checkout from before it,
``--before-src``, with its programs, ``--before-programs``), as shipped, and optionally other
programs of the shipped code (``--also LABEL=PROGRAMS_DIR``, e.g. an earlier export kept aside).

Each (program, round) runs in a child process of its own holding that one program (the same
conditions for both); rounds alternate which goes first. Per prompt: prefill, then
``--max-new-tokens`` calls of one token each, timed; the table gives the median ms per token and
the decoding tokens/s (new tokens over the time of those calls), each the median over rounds.

  git worktree add /tmp/before bd9b91f   # + its programs: `omnidraft export --target` there
  python scripts/bench_one_token.py --targets qwen2.5-coder-0.5b,qwen2.5-coder-1.5b \\
      --before-src /tmp/before-pkg --before-programs /tmp/before-home/programs
Writes bench/results/one-token-<stamp>.{json,md}.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _worker(prog: str, prompts_file: str, new_tokens: int, threads: int) -> None:
    """Child process: greedy one-token decoding of every prompt in ``prompts_file`` (token ids) on
    the program at ``prog``, with the MKL guard of whichever checkout is first on PYTHONPATH."""
    import torch

    from omnidraft.device import runtime, threads as th

    th.set_program_threads(threads)
    torch.set_num_threads(threads)
    lm = runtime.ExecuTorchLM(prog)
    out = []
    for ids in json.loads(Path(prompts_file).read_text()):
        lm.reset()
        tok = int(lm.prefill(ids).logits[-1].argmax())
        times = []
        for _ in range(new_tokens):
            t0 = time.perf_counter()
            logits = lm.extend([tok], last_only=True).logits
            times.append(time.perf_counter() - t0)
            tok = int(logits[-1].argmax())
        out.append({"ms_per_token": statistics.median(times) * 1e3, "tokens_per_s": len(times) / sum(times)})
    print(json.dumps(out))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":  # possibly an older checkout's omnidraft
        _worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    from omnidraft.quiet import quiet_libraries

    quiet_libraries()
    import tempfile

    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, target=None, k=False, max_new_tokens=64)
    ap.add_argument("--targets", default="qwen2.5-coder-0.5b")
    ap.add_argument("--quant", default="8da8w")
    ap.add_argument("--code", type=int, default=3)
    ap.add_argument("--chat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--before-src", required=True, help="a checkout from before the change, first on PYTHONPATH")
    ap.add_argument("--before-programs", required=True, help="the folder holding that code's target programs")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=PROGRAMS_DIR",
                    help="another folder of target programs, run by the shipped code")
    ap.add_argument("--long", type=int, default=2, help="long-context prompts (3 HumanEval prompts each)")
    args = ap.parse_args()
    log = benchsetup.logger("one-token")
    from omnidraft.decode.text import encode_prompt
    from omnidraft.export.layout import program_dir
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.device.cpu import cpu_info

    from omnidraft.prompts import humaneval

    sets = {"code": benchsetup.prompt_mix(args.code, 0, code_start=20),
            "chat": benchsetup.prompt_mix(0, args.chat, chat_start=4),
            "long": [("\n".join(humaneval(limit=3, start=40 + 3 * i)), False) for i in range(args.long)]}
    sets = {k: v for k, v in sets.items() if v}
    report = benchio.stamp_report(cpu=cpu_info(), rounds=args.rounds, new_tokens=args.max_new_tokens, targets={})
    md = []
    scratch = Path(tempfile.mkdtemp())
    for name in args.targets.split(","):
        tok = load_tokenizer(name)
        prog = program_dir(name, args.quant, 1024, role="target")
        progs = {"before #23 (custom_sdpa)": (Path(args.before_programs) / prog.name, args.before_src),
                 **{label: (Path(folder) / prog.name, "") for label, folder in (a.split("=", 1) for a in args.also)},
                 "shipped": (prog, "")}
        rows, lengths = {}, {}
        for set_name, prompts in sets.items():
            ids = scratch / f"{name}-{set_name}.json"
            encoded = [encode_prompt(tok, p, chat=chat) for p, chat in prompts]
            lengths[set_name] = f"{min(map(len, encoded))}-{max(map(len, encoded))}"
            ids.write_text(json.dumps(encoded))
            samples = {r: {"ms_per_token": [], "tokens_per_s": []} for r in progs}
            for rnd in range(args.rounds):
                order = list(progs) if rnd % 2 == 0 else list(reversed(progs))
                for r in order:
                    program, src = progs[r]
                    out = subprocess.run([sys.executable, __file__, "--worker", str(program), str(ids),
                                          str(args.max_new_tokens), str(args.threads)], capture_output=True,
                                         text=True, check=True, env={**os.environ, "PYTHONPATH": src})
                    per_prompt = json.loads(out.stdout.strip().splitlines()[-1])
                    for key in samples[r]:
                        samples[r][key].append(statistics.median(p[key] for p in per_prompt))
                log(f"{name} {set_name} round {rnd + 1}/{args.rounds}: " + ", ".join(
                    f"{r} {s['ms_per_token'][-1]:.2f} ms" for r, s in samples.items()))
            rows[set_name] = {r: {k: round(statistics.median(v), 3) for k, v in s.items()} for r, s in samples.items()}
        report["targets"][name] = {"rows": rows, "prompt_tokens": lengths,
                                   "programs": {label: str(p) for label, (p, _) in progs.items()}}
        md += [f"## {name} ({args.quant})", ""]
        before = next(iter(progs))
        md += benchio.table(["prompts (prompt tokens)", "program", "ms/token", "x before", "decode tok/s"],
                            [[f"{s} ({len(sets[s])}: {lengths[s]})", label, r[label]["ms_per_token"],
                              round(r[label]["ms_per_token"] / r[before]["ms_per_token"], 3),
                              r[label]["tokens_per_s"]] for s, r in rows.items() for label in progs])
        md.append("")
    cpu = report["cpu"]
    md = [f"CPU: {cpu['model']}, {cpu['cores']} cores, flags {' '.join(cpu['flags'])}; {args.threads} threads. "
          f"Greedy decoding, one token per call, {args.max_new_tokens} new tokens per prompt after its prefill; "
          f"each program in a child process of its own, {args.rounds} rounds alternating which goes first; "
          f"medians over prompts, then over rounds.", "", *md]
    benchio.save(args.out, "one-token", "One-token decoding before and after batch-invariant attention", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
