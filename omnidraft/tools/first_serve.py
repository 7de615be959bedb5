"""`omnidraft serve`'s first start as a new user meets it (#87), checked end to end: on an empty
OMNIDRAFT_HOME, the models fetched (README command 2's `models fetch`), `omnidraft serve --drafter
D --target T --api-key KEY` as docs/serving.md shows it (no `omnidraft pair` first); /health's
stages and the time to ready; then greedy chat answers through the official openai SDK: the first
request, 4 clients at once, and the first request after `kill -9` and a restart, each compared
with `omnidraft generate --chat` of the target alone on the runtime the server reports; the
daemon the killed server started gone within seconds; and the server's tokens/s on fresh prompts
against llama-server on the same GGUF (where $LLAMA_SERVER names its binary), one after the other.

Prints one JSON document (also written to --out). Example:
  LLAMA_SERVER=$BIN/llama-server python -m omnidraft.tools.first_serve --home /tmp/fresh-home --out first-serve.json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

CONCURRENT = 4


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "omnidraft.cli", *args]


class Served:
    """One `omnidraft serve` process and an openai client to it; ``stages``: (seconds since start,
    /health's stage) as they changed."""

    def __init__(self, drafter: str, target: str, key: str, env: dict, log: Path):
        import openai

        from omnidraft.vllm.launch import free_port

        self.port, self.t0, self.stages = free_port(), time.monotonic(), []
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(_cli("serve", "--drafter", drafter, "--target", target, "--api-key", key,
                                          "--port", str(self.port)), env=env, stdout=self.log, stderr=self.log)
        self.ready_s = self._wait()
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=key, max_retries=0,
                                    timeout=900)

    def _wait(self, limit_s: float = 3600) -> float:
        while time.monotonic() - self.t0 < limit_s:
            if self.proc.poll() is not None:
                raise SystemExit(f"omnidraft serve exited with {self.proc.returncode}: see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return round(time.monotonic() - self.t0, 1)
            except urllib.error.HTTPError as err:  # 503 while loading: its stage
                stage = json.loads(err.read() or b"{}").get("stage")
                if stage and (not self.stages or self.stages[-1][1] != stage):
                    self.stages.append((round(time.monotonic() - self.t0, 1), stage))
            except OSError:
                pass
            time.sleep(1)
        raise SystemExit(f"omnidraft serve was not ready within {limit_s:.0f} s")

    def ask(self, text: str, max_tokens: int) -> dict:
        t = time.perf_counter()
        out = self.client.chat.completions.create(model=self.client.models.list().data[0].id, temperature=0.0,
                                                  messages=[{"role": "user", "content": text}], max_tokens=max_tokens)
        spec = out.usage.model_extra["speculative"]
        return {"text": out.choices[0].message.content, "seconds": time.perf_counter() - t,
                "tokens": out.usage.completion_tokens, "runtime": spec["target_runtime"],
                "exactness": spec.get("exactness"), "lossless": spec["lossless"]}


def _daemon_pid(env: dict) -> int | None:
    try:
        return int((Path(env["OMNIDRAFT_HOME"]) / "daemon" / "pid").read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def _target_alone(target: str, runtime: str, text: str, max_tokens: int, env: dict) -> str:
    run = subprocess.run(_cli("generate", "--target", target, "--chat", "--prompt", text, "--max-new-tokens",
                              str(max_tokens), "--target-runtime", runtime, "--json", "--no-log"),
                         env=env, capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        raise SystemExit(f"omnidraft generate failed: {run.stderr.strip()[-500:]}")
    return json.loads(run.stdout)["text"]


def _llama_server(target: str, texts: list[str], max_tokens: int, threads: int) -> dict | None:
    """llama-server on the target's GGUF, the same prompts one after the other: tokens/s."""
    from omnidraft.bench.rows import Prompt
    from omnidraft.bench.servers import llama_server
    from omnidraft.models.loading import load_tokenizer

    row = llama_server(target, load_tokenizer(target), lambda s: print(s, file=sys.stderr), threads=threads)
    if row is None:
        return None
    try:
        started = time.perf_counter()
        runs = [row.run(Prompt("first", t, chat=True), max_tokens) for t in texts]
        return {"tokens_per_s": round(sum(r.tokens for r in runs) / sum(r.seconds for r in runs), 2),
                "runs": [{"tokens": r.tokens, "seconds": round(r.seconds, 2)} for r in runs],
                "wall_s": round(time.perf_counter() - started, 1)}
    finally:
        row.close()


def check(drafter: str, target: str, home: Path, max_tokens: int, timed: int, threads: int) -> dict:
    from omnidraft.bench.prompts import prompt_sets
    from omnidraft.device.cpu import cpu_info
    from omnidraft.measure.stamp import git_state

    if home.exists() and any(home.iterdir()):
        raise SystemExit(f"{home} is not empty: the check starts from a fresh home")
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMNIDRAFT_HOME": str(home), "OMP_NUM_THREADS": str(threads)}
    texts = [p.text for p in prompt_sets({"code": 4, "chat": 4 + timed})]
    out: dict = {"drafter": drafter, "target": target, "home": str(home), "cpu": cpu_info(), "code": git_state(),
                 "max_tokens": max_tokens}
    t = time.monotonic()
    subprocess.run(_cli("models", "fetch", drafter, target), env=env, check=True, capture_output=True)
    out["fetch_s"] = round(time.monotonic() - t, 1)
    key, log = secrets.token_hex(16), home / "serve.log"
    server = Served(drafter, target, key, env, log)
    out["first_start"] = {"ready_s": server.ready_s, "stages": server.stages}
    answers: dict[str, dict] = {"first": server.ask(texts[0], max_tokens)}
    together: dict[int, dict] = {}

    def client(i: int) -> None:
        together[i] = server.ask(texts[1 + i], max_tokens)

    threads_ = [threading.Thread(target=client, args=(i,)) for i in range(CONCURRENT)]
    for th in threads_:
        th.start()
    for th in threads_:
        th.join()
    answers.update({f"together {i}": together[i] for i in range(CONCURRENT)})
    daemon = _daemon_pid(env)
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    t = time.monotonic()
    while _alive(daemon) and time.monotonic() - t < 30:
        time.sleep(0.1)
    out["daemon_after_kill"] = {"pid": daemon, "gone_s": None if _alive(daemon) else round(time.monotonic() - t, 2)}
    server = Served(drafter, target, key, env, log)
    out["restart"] = {"ready_s": server.ready_s}
    answers["after restart"] = server.ask(texts[1 + CONCURRENT], max_tokens)
    fresh = texts[2 + CONCURRENT:]
    timed_runs = [server.ask(text, max_tokens) for text in fresh]
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(60)
    asked = [texts[0], *texts[1:1 + CONCURRENT], texts[1 + CONCURRENT]]
    for (name, a), text in zip(answers.items(), asked):
        a["equal_to_target_alone"] = a["text"] == _target_alone(target, a["runtime"], text, max_tokens, env)
    out["answers"] = {name: {k: (round(v, 2) if isinstance(v, float) else v) for k, v in a.items() if k != "text"}
                      for name, a in answers.items()}
    out["all_equal"] = all(a["equal_to_target_alone"] for a in answers.values())
    first_runs = [answers["first"], answers["after restart"], *timed_runs]
    out["serve_tokens_per_s"] = round(sum(r["tokens"] for r in first_runs) / sum(r["seconds"] for r in first_runs), 2)
    out["llama_server"] = _llama_server(target, [texts[0], texts[1 + CONCURRENT], *fresh], max_tokens, threads)
    if out["llama_server"]:
        out["serve_vs_llama_server"] = round(out["serve_tokens_per_s"] / out["llama_server"]["tokens_per_s"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m omnidraft.tools.first_serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafter", default="smollm2-135m")
    ap.add_argument("--target", default="qwen2.5-coder-0.5b")
    ap.add_argument("--home", required=True, help="an empty folder: the fresh OMNIDRAFT_HOME")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--timed", type=int, default=4, help="fresh prompts timed after the restart (beside its first)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    result = check(args.drafter, args.target, Path(args.home), args.max_tokens, args.timed, args.threads)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0 if result["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
