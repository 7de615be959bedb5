"""Benchmark: the pair verifying through a serving engine's OpenAI-compatible API (an openai+
target: llama-cpp-python's server, the ``llamacpp`` extra, serving the packaged GGUF) vs the
engine generating alone server-side and streaming (one request, no per-token round trip: the
honest cloud baseline), at a SIMULATED network round trip of 0 / 20 / 80 ms (injected in the
client before each request; once for the baseline); the engine's evaluations (batched forward
passes) per generated token, the cloud provider's cost; then N concurrent device sessions against
one server: throughput and p50/p95 per verify. Greedy, k fixed, prompts interleaved per RTT.
(`scripts/bench_remote.py` measures `omnidraft serve-target`, our reference server.)
Example:
  python scripts/bench_remote_engine.py --target qwen2.5-coder-0.5b --code 1 --chat 2
"""

from __future__ import annotations

import json
import math
import secrets
import statistics
import sys
import time
import urllib.request
from contextlib import ExitStack

from benchio import save, stamp_report, table
from benchsetup import concurrently, logger, parser, prompt_mix, start


def stream_alone(url: str, key: str, text: str, max_tokens: int, rtt_ms: float, tok) -> dict:
    """The engine generating ``max_tokens`` greedily in one streamed request: seconds to the first
    and the last token (plus one simulated round trip), and tokens (``max_tokens`` when it ran to
    the length limit, else the streamed text's by ``tok``: chunks may group tokens)."""
    from omnidraft.remote.echo_wire import NEUTRAL

    body = {"prompt": text, "max_tokens": max_tokens, "temperature": 0, "stream": True, **NEUTRAL}
    req = urllib.request.Request(url + "/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    t0 = time.perf_counter()
    time.sleep(rtt_ms / 1000.0)
    first, out, finish = None, "", None
    with urllib.request.urlopen(req) as resp:
        for line in resp:
            if line.startswith(b"data: {"):
                choice = json.loads(line[6:])["choices"][0]
                out += choice.get("text") or ""
                finish = choice.get("finish_reason") or finish
                first = first or time.perf_counter() - t0
    return {"s": time.perf_counter() - t0, "first_s": first,
            "tokens": max_tokens if finish == "length" else len(tok(out, add_special_tokens=False).input_ids)}


def _post(url: str, key: str, body: dict) -> float:
    """Seconds for one /completions request (its reply read whole)."""
    req = urllib.request.Request(url + "/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    t0 = time.perf_counter()
    urllib.request.urlopen(req).read()
    return time.perf_counter() - t0


def resend_cost(url: str, key: str, tok, text: str, lengths: list[int]) -> list[dict]:
    """What resending a context costs at each length n: the prompt evaluated from scratch, with the
    engine's prefix cache holding all but the last 4 tokens (no log-probabilities), and the same
    prefix hit as a verify request (echo + 20 log-probabilities at every position)."""
    from omnidraft.remote.echo_wire import NEUTRAL

    ids = tok(text, add_special_tokens=False).input_ids
    rows = []
    for n in lengths:
        context, full = tok.decode(ids[:n]), tok.decode(ids[:n + 4])
        one = {"max_tokens": 1, "temperature": 0, **NEUTRAL}
        _post(url, key, {"prompt": "#" + full, **one})  # some other prompt: nothing of ``full`` cached
        cold = _post(url, key, {"prompt": full, **one})
        _post(url, key, {"prompt": context, **one})  # the cache now holds the context
        hit = _post(url, key, {"prompt": full, **one})
        _post(url, key, {"prompt": context, **one})
        echo = _post(url, key, {"prompt": full, "echo": True, "logprobs": 20, **one})
        rows.append({"context_tokens": n, "cold_s": round(cold, 3), "prefix_hit_s": round(hit, 3),
                     "verify_echo_s": round(echo, 3), "echo_s_per_position": round(echo / (n + 4), 4)})
    return rows


def main(argv=None) -> int:
    ap = parser(__doc__, target="qwen2.5-coder-0.5b", max_new_tokens=24)
    ap.add_argument("--code", type=int, default=1, help="HumanEval prompts")
    ap.add_argument("--chat", type=int, default=2, help="chat prompts")
    ap.add_argument("--rtts", nargs="*", type=float, default=[0, 20, 80], help="none: the sessions only")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--session-tokens", type=int, default=16, help="new tokens per concurrent session")
    ap.add_argument("--resend", nargs="*", type=int, default=[32, 128, 512],
                    help="context lengths at which to time resending a context (none: skip)")
    args = ap.parse_args(argv)
    start(args.threads)
    log = logger("remote-engine")
    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_speculative
    from omnidraft.sampling import SamplingConfig
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.catalog import ensure_gguf
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.build import load_drafter
    from omnidraft.device.cpu import cpu_info
    from omnidraft.propose.config import SpecConfig
    from omnidraft.remote.llamacpp import llamacpp_server
    from omnidraft.remote.openai_api import OpenAITarget
    from omnidraft.translate.state import PairState

    key = secrets.token_urlsafe(24)
    gguf = ensure_gguf(args.target)
    servers = ExitStack()
    url = servers.enter_context(llamacpp_server(gguf, key, threads=args.threads, logits_all=True))
    plain = servers.enter_context(llamacpp_server(gguf, key, threads=args.threads, logits_all=False))
    ttok, dtok = load_tokenizer(args.target), load_tokenizer(args.drafter)
    eos = {ttok.eos_token_id}
    prompts = prompt_mix(args.code, args.chat)

    def pair_run(drafter, prompt, chat, max_new, rtt_ms, on_verify=None):
        target = OpenAITarget(url, key, None, ttok, SamplingConfig(), eos_ids=eos, rtt_ms=rtt_ms)
        if on_verify:
            verify = target.verify

            def timed(proposal, q=None):
                t = time.perf_counter()
                out = verify(proposal, q)
                on_verify(time.perf_counter() - t)
                return out
            target.verify = timed
        pair = PairState(dtok, ttok, drafter.vocab_size, target.vocab_size)
        t0 = time.perf_counter()
        out = generate_speculative(drafter, target, pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(args.k),
                                   max_new_tokens=max_new, chat=chat)
        tokens = sum(t not in eos for t in out.token_ids)  # as the engine counts: its EOS is not text
        return {"s": time.perf_counter() - t0, "tokens": tokens, "evaluations": target.evaluations,
                "requests": target.http.requests, "accepted": out.metrics["accepted"],
                "proposed": out.metrics["proposed"]}

    try:
        drafter = load_drafter(args.drafter, "auto")
        report = stamp_report(cpu=cpu_info(), target=args.target, gguf=gguf.name, drafter=args.drafter,
                              drafter_runtime=type(drafter).__name__, k=args.k, max_new_tokens=args.max_new_tokens,
                              rtt_simulated=True, rows={}, sessions={}, resend=[])
        report["resend"] = resend_cost(url, key, ttok, "\n\n".join(p for p, _ in prompt_mix(20, 0)), args.resend)
        log(f"resending a context: {report['resend']}")
        for rtt in args.rtts:
            rows = []
            for i, (p, chat) in enumerate(prompts):
                text = ttok.decode(encode_prompt(ttok, p, chat=chat))
                alone = stream_alone(plain, key, text, args.max_new_tokens, rtt, ttok)
                paired = pair_run(drafter, p, chat, args.max_new_tokens, rtt)
                rows.append({"prompt_tokens": len(encode_prompt(ttok, p, chat=chat)), "alone": alone, "pair": paired})
                log(f"rtt {rtt:g} ms prompt {i + 1}/{len(prompts)}: alone {alone['tokens'] / alone['s']:.1f} tok/s, "
                    f"pair {paired['tokens'] / paired['s']:.2f} tok/s, {paired['evaluations']} evaluations "
                    f"for {paired['tokens']} tokens")
            report["rows"][str(rtt)] = rows
        if args.sessions:
            report["sessions"] = sessions(args, prompts, pair_run, plain, key, ttok)
            log(f"{args.sessions} sessions: {report['sessions']}")
    finally:
        servers.close()
    save(args.out, "remote-engine", "The pair against a serving engine's OpenAI API (llama-cpp-python)", report,
         markdown(report, args, gguf.name))
    return 0


def sessions(args, prompts, pair_run, plain: str, key: str, ttok) -> dict:
    """``args.sessions`` device sessions at once (each its own eager drafter, one prompt) against
    the one server, then as many streams of the engine alone; per-verify p50/p95."""
    from omnidraft.decode.text import encode_prompt
    from omnidraft.pairs.build import load_drafter

    lat: list[float] = []
    drafters = [load_drafter(args.drafter, "eager") for _ in range(args.sessions)]
    results: list[dict] = [{}] * args.sessions
    errors: list[str] = []

    def session(j):
        p, chat = prompts[j % len(prompts)]
        try:
            results[j] = pair_run(drafters[j], p, chat, args.session_tokens, 0.0, lat.append)
        except Exception as err:  # counted, reported
            errors.append(repr(err))
    wall = concurrently(session, args.sessions)
    alone = []
    texts = [ttok.decode(encode_prompt(ttok, p, chat=c)) for p, c in prompts]
    wall_alone = concurrently(lambda j: alone.append(stream_alone(
        plain, key, texts[j % len(texts)], args.session_tokens, 0.0, ttok)), args.sessions)
    lat.sort()
    return {"n": args.sessions, "tokens": sum(r.get("tokens", 0) for r in results), "wall_s": round(wall, 2),
            "verifies": len(lat), "p50_s": round(statistics.median(lat), 3) if lat else None,
            "p95_s": round(lat[math.ceil(0.95 * len(lat)) - 1], 3) if lat else None, "errors": errors,
            "alone_tokens": sum(a["tokens"] for a in alone), "alone_wall_s": round(wall_alone, 2)}


def markdown(report: dict, args, gguf: str) -> list[str]:
    cpu = report["cpu"]
    md = [f"CPU: {cpu['model']}, {cpu['cores']} cores, flags {' '.join(cpu['flags'])}. Server: llama-cpp-python's "
          f"OpenAI server, {gguf}, {args.threads} threads, logits_all; client on the same machine (loopback). "
          f"Drafter {args.drafter} ({report['drafter_runtime']}), omnidraft k = {args.k}, greedy, "
          f"{args.max_new_tokens} new tokens. RTT is SIMULATED (a sleep before each request). `{report['command']}`", "",
          "| RTT (simulated) | prompt tokens | engine alone, streaming: tokens/s (first token s) | pair: tokens/s | "
          "pair / alone | engine evaluations per token (pair; alone = 1) | requests per token | acceptance |",
          "|---|---|---|---|---|---|---|---|"]
    for rtt, rows in report["rows"].items():
        for r in rows:
            a, p = r["alone"], r["pair"]
            md.append(f"| {float(rtt):g} ms | {r['prompt_tokens']} | {a['tokens'] / a['s']:.2f} ({a['first_s']:.2f}) | "
                      f"{p['tokens'] / p['s']:.3f} | {(p['tokens'] / p['s']) / (a['tokens'] / a['s']):.3f} | "
                      f"{p['evaluations'] / p['tokens']:.2f} | {p['requests'] / p['tokens']:.2f} | "
                      f"{p['accepted'] / max(1, p['proposed']):.2f} |")
    if report["resend"]:
        md += ["", "## Resending the context: what the prefix cache saves (verify-shaped requests: context + 4 tokens)",
               ""]
        md += table(["context tokens", "from scratch s", "prefix cached, no log-probabilities s",
                     "prefix cached, echo + 20 log-probabilities (a verify) s", "echo s per prompt position"],
                    [[r["context_tokens"], r["cold_s"], r["prefix_hit_s"], r["verify_echo_s"], r["echo_s_per_position"]]
                     for r in report["resend"]])
    s = report["sessions"]
    if s:
        md += ["", f"## {s['n']} concurrent sessions, {args.session_tokens} new tokens each, RTT 0", ""]
        md += table(["", "tokens", "wall s", "tokens/s", "verifies", "p50 s / verify", "p95 s / verify", "errors"],
                    [["pairs", s["tokens"], s["wall_s"], round(s["tokens"] / s["wall_s"], 3), s["verifies"],
                      s["p50_s"], s["p95_s"], len(s["errors"])],
                     ["engine alone, streaming", s["alone_tokens"], s["alone_wall_s"],
                      round(s["alone_tokens"] / s["alone_wall_s"], 2), "", "", "", 0]])
    return md


if __name__ == "__main__":
    sys.exit(main())
