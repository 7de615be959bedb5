"""Benchmark: speculative decoding against a cloud target over HTTP (loopback) vs plain remote
autoregressive decoding, with a SIMULATED network round trip of 0 / 20 / 80 ms injected in the
client transport; then a load test of concurrent sessions (p50/p95 latency, errors, leaks).

Remote autoregressive decoding uses the same protocol with empty proposals (each verify returns
one bonus token), so both rows pay one round trip per target forward.
Example:
  python scripts/bench_remote.py --target qwen2.5-coder-1.5b --drafter smollm2-135m
"""

from __future__ import annotations

import secrets
import socket
import statistics
import sys
import threading
import time

import torch
from benchio import save, stamp_report, table
from benchsetup import concurrently, load_models, logger, parser, prompt_mix, start


def serve(model, name, token):
    import uvicorn

    from omnidraft.remote.server import ServerLimits, create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(model, name, token, ServerLimits(max_sessions=32, rate_per_s=10_000, burst=10_000))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def main(argv=None) -> int:
    ap = parser(__doc__, target="qwen2.5-coder-1.5b", dtype="--dtype", max_new_tokens=32, prompts=4,
                prompts_help="HumanEval prompts (and as many chat prompts)")
    ap.add_argument("--rtts", nargs="+", type=float, default=[0, 20, 80])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--requests", type=int, default=20)
    args = ap.parse_args(argv)

    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_speculative
    from omnidraft.remote.remote import RemoteTarget
    from omnidraft.models.eager import CausalLM
    from omnidraft.sampling import SamplingConfig
    from omnidraft.propose.config import SpecConfig
    from omnidraft.decode.target import LocalTarget
    from omnidraft.decode.text import encode_prompt, model_eos_ids, stop_ids

    start(args.threads)
    log = logger()
    token = secrets.token_urlsafe(24)
    models = load_models(args.drafter, args.target, drafter_dtype=args.dtype, target_dtype=args.dtype)
    drafter, ttok, target = models.drafter, models.ttok, models.target
    url, server = serve(target.model, args.target, token)
    pair = models.pair()
    prompts = prompt_mix(args.prompts, args.prompts)
    stop = stop_ids(ttok, model_eos_ids(target))
    report = stamp_report(drafter=args.drafter, target=args.target, dtype=args.dtype, k=args.k,
                          max_new_tokens=args.max_new_tokens, network="loopback + SIMULATED round trip "
                          "(sleep in the client transport per request)",
                          prompts=[p for p, _ in prompts], rows=[])

    def remote_ar(rtt, prompt_ids):
        t = RemoteTarget(url, token, SamplingConfig(), rtt_ms=rtt)
        t0 = time.perf_counter()
        t.start(prompt_ids)
        out = []
        while len(out) < args.max_new_tokens:
            out.append(t.verify([]).token)
            if out[-1] in stop:
                break
        t.close()
        return out, time.perf_counter() - t0, t.requests

    for rtt in args.rtts:
        refs = {}
        for name in ("remote ar", "remote omnidraft"):
            tokens = wall = requests = equal = 0
            for p, chat in prompts:
                if name == "remote ar":
                    ids, secs, reqs = remote_ar(rtt, encode_prompt(ttok, p, chat=chat))
                    refs[p] = ids
                else:
                    t = RemoteTarget(url, token, SamplingConfig(), rtt_ms=rtt)
                    t.info()
                    r = generate_speculative(drafter, t, pair, p, cfg=SpecConfig("omnidraft"), k=FixedK(args.k),
                                             chat=chat, max_new_tokens=args.max_new_tokens)
                    ids, secs, reqs = r.token_ids, r.metrics["wall_s"], t.requests
                    t.close()
                tokens += len(ids)
                wall += secs
                requests += reqs
                equal += ids == refs[p]
            row = {"simulated_rtt_ms": rtt, "strategy": name, "tokens_per_s": round(tokens / wall, 3),
                   "requests_per_token": round(requests / tokens, 3), "equal_to_remote_ar": f"{equal}/{len(prompts)}"}
            report["rows"].append(row)
            log(str(row))

    # load: concurrent sessions, each checked against an in-process reference (no leaks)
    g = torch.Generator().manual_seed(0)
    plans = [(torch.randint(0, 30000, (12,), generator=g).tolist(),
              [torch.randint(0, 30000, (4,), generator=g).tolist() for _ in range(args.requests)])
             for _ in range(args.sessions)]
    expected = []
    for prompt_ids, proposals in plans:
        lt = LocalTarget(CausalLM(target.model), SamplingConfig())
        lt.start(prompt_ids)
        expected.append([lt.verify(pr) for pr in proposals])
    latencies, errors, leaks = [], [], []

    def client(i):
        prompt_ids, proposals = plans[i]
        t = RemoteTarget(url, token, SamplingConfig())
        try:
            t.start(prompt_ids)
            for j, pr in enumerate(proposals):
                t0 = time.perf_counter()
                v = t.verify(pr)
                latencies.append(time.perf_counter() - t0)
                if v != expected[i][j]:
                    leaks.append((i, j))
            t.close()
        except Exception as err:  # counted, reported
            errors.append(repr(err))

    wall = concurrently(client, args.sessions)
    lat = sorted(latencies)
    report["load"] = {"sessions": args.sessions, "requests_each": args.requests,
                      "p50_ms": round(1e3 * statistics.median(lat), 1),
                      "p95_ms": round(1e3 * lat[int(0.95 * (len(lat) - 1))], 1),
                      "errors": len(errors), "error_samples": errors[:3], "cross_session_mismatches": len(leaks),
                      "wall_s": round(wall, 2)}
    server.should_exit = True
    md = [f"{args.drafter} on the device side -> {args.target} served by `omnidraft.remote.server` on loopback, "
          f"{args.dtype}, greedy, {len(prompts)} prompts x {args.max_new_tokens} tokens. Network delay is "
          f"SIMULATED in the client transport. `{report['command']}`", ""]
    md += table(["simulated RTT (ms)", "strategy", "tokens/s", "requests/token", "equal to remote ar"],
                [[r["simulated_rtt_ms"], r["strategy"], r["tokens_per_s"], r["requests_per_token"],
                  r["equal_to_remote_ar"]] for r in report["rows"]])
    ld = report["load"]
    md += ["", f"Load: {ld['sessions']} concurrent sessions x {ld['requests_each']} verify requests (4-token "
           f"proposals): p50 {ld['p50_ms']} ms, p95 {ld['p95_ms']} ms, errors {ld['errors']}, cross-session "
           f"mismatches {ld['cross_session_mismatches']}."]
    save(args.out, "remote", "Remote verification benchmark", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
