"""Benchmark: the n-gram cache's configurations on the real pair, in one run.

Rows (strategy omnidraft, greedy): no cache / online only / seeded only / seeded + online
(unbounded: the "full" size S) / LRU and LFU bounded to S/4 and S/2. The bounded rows start the
way a device does after some use: loaded (most-hit first) from the store a warm-up pass wrote.
Also: bytes per entry (tracemalloc) and the store's load time for 50k entries.
Writes bench/results/ngram-cache-<date>.json and .md.
Example:
  python scripts/bench_ngram_cache.py --target qwen2.5-coder-1.5b --dtype bf16
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from benchio import save, stamp_report


def memory_and_load() -> dict:
    from omnidraft.translate.ngram import NgramCache
    from omnidraft.translate.ngram_store import NgramStore

    rnd = random.Random(0)
    entries = {}
    while len(entries) < 50000:
        key = tuple(rnd.randrange(49152) for _ in range(rnd.choice([1, 2, 2, 3])))
        entries[key] = (rnd.randrange(151936),) if len(key) > 1 else (rnd.randrange(151936), 7)
    out = {}
    for policy in ("lfu", "lru", "unbounded"):
        warm = NgramCache(4, policy=policy, max_entries=None if policy == "unbounded" else 2, window=1)
        for k, v in list(entries.items())[:4]:  # lazy imports happen here, not in the trace
            warm.add(k, v)
            warm.longest(list(k), 0)
        tracemalloc.start()
        c = NgramCache(4, policy=policy, max_entries=None if policy == "unbounded" else 10**6)
        before = tracemalloc.get_traced_memory()[0]
        for k, v in list(entries.items())[:20000]:
            c.add(k, v)
        c.drain()
        out[f"bytes_per_entry_20k_{policy}"] = round((tracemalloc.get_traced_memory()[0] - before) / len(c), 1)
        tracemalloc.stop()
    with tempfile.TemporaryDirectory() as d:
        full = NgramCache(4, policy="lfu", max_entries=10**6)
        for k, v in entries.items():
            full.add(k, v, seeded=True)
        for k in list(entries)[:20000]:
            full.longest(list(k), 0)
        store = NgramStore(Path(d) / "n.sqlite", "bench")
        store.flush(full)
        for policy in ("lfu", "lru"):
            times = []
            for _ in range(5):
                c = NgramCache(4, policy=policy, max_entries=10**6)
                t0 = time.perf_counter()
                store.load_into(c)
                times.append(time.perf_counter() - t0)
            out[f"load_50k_ms_{policy}_median"] = round(sorted(times)[2] * 1e3, 1)
        store.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", default="smollm2-135m")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--humaneval", type=int, default=10)
    ap.add_argument("--chat", type=int, default=8)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)

    from omnidraft.decode.generate import generate_speculative
    from omnidraft.models.loading import load_model, load_tokenizer, set_threads
    from omnidraft.translate.state import Pair
    from omnidraft.prompts import CHAT_PROMPTS, humaneval
    from omnidraft.decode.loop import SpecConfig

    set_threads(args.threads)
    test = [(p, False) for p in humaneval(limit=args.humaneval)] + \
        [(p, True) for p in CHAT_PROMPTS[: args.chat]]
    warm = [(p, False) for p in humaneval(limit=args.humaneval, start=100)] + \
        [(p, True) for p in CHAT_PROMPTS[args.chat: args.chat * 2]]
    dtok, ttok = load_tokenizer(args.drafter), load_tokenizer(args.target)
    drafter = load_model(args.drafter, dtype=args.dtype)
    target = load_model(args.target, dtype=args.dtype)
    report = stamp_report(drafter=args.drafter, target=args.target, dtype=args.dtype, k=args.k,
                          max_new_tokens=args.max_new_tokens, test_prompts=[p for p, _ in test],
                          warmup_prompts=[p for p, _ in warm], memory=memory_and_load(), rows=[])
    print(json.dumps(report["memory"]), file=sys.stderr)

    def run(name, pair, learn, prompts=test):
        cfg = SpecConfig("omnidraft", k=args.k, learn_ngrams=learn)
        tokens = wall = proposed = accepted = steps = ngram = 0
        for p, chat in prompts:
            m = generate_speculative(drafter, target, pair, p, cfg=cfg, chat=chat,
                                     max_new_tokens=args.max_new_tokens).metrics
            tokens += m["new_tokens"]
            wall += m["wall_s"]
            proposed += m["proposed"]
            accepted += m["accepted"]
            steps += m["steps"]
            ngram += m["ngram_proposed"]
        row = {"config": name, "entries": len(pair.cache), "seeded": pair.cache.seeded,
               "learned": pair.cache.learned, "evictions": pair.cache.evictions,
               "acceptance_rate": round(accepted / max(proposed, 1), 4),
               "ngram_hits_per_step": round(ngram / max(steps, 1), 3),
               "tokens_per_s": round(tokens / wall, 3)}
        if prompts is test:
            report["rows"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        return row

    def pair(**kw):
        return Pair(dtok, ttok, drafter.vocab_size, target.vocab_size, **kw)

    run("no cache", pair(seed_ngrams=False), learn=False)
    run("online only (unbounded)", pair(seed_ngrams=False, policy="unbounded", max_bytes=None), learn=True)
    run("seeded only (unbounded)", pair(policy="unbounded", max_bytes=None), learn=False)
    with tempfile.TemporaryDirectory() as d:
        store = Path(d) / "ngrams.sqlite"
        warm_pair = pair(policy="lfu", max_bytes=None, max_entries=10**7, store_path=store)
        run("warm-up", warm_pair, learn=True, prompts=warm)
        warm_pair.save()
        full = pair(policy="lfu", max_bytes=None, max_entries=10**7, store_path=store)
        size = len(full.cache)
        run("seeded + online (full)", full, learn=True)
        report["full_size"] = size
        for policy in ("lru", "lfu"):
            for frac in (4, 2):
                bounded = pair(policy=policy, max_bytes=None, max_entries=size // frac, store_path=store)
                run(f"{policy.upper()} at 1/{frac} ({size // frac} entries)", bounded, learn=True)
                bounded.store.close()
    mem = report["memory"]
    md = [f"# N-gram cache benchmark ({report['date'][:16]}Z)", "",
          f"{args.drafter} -> {args.target}, {args.dtype}, omnidraft k={args.k}, greedy, "
          f"{len(test)} test prompts ({args.humaneval} HumanEval + {args.chat} chat), "
          f"{args.max_new_tokens} new tokens; `{report['command']}`", "",
          "| config | entries | seeded | learned | evictions | acceptance | n-gram hits/step | tokens/s |",
          "|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        md.append(f"| {r['config']} | {r['entries']} | {r['seeded']} | {r['learned']} | {r['evictions']} | "
                  f"{r['acceptance_rate']} | {r['ngram_hits_per_step']} | {r['tokens_per_s']} |")
    md += ["", "Memory (tracemalloc, 20k entries, bytes/entry): "
           f"LFU {mem['bytes_per_entry_20k_lfu']}, LRU {mem['bytes_per_entry_20k_lru']}, "
           f"plain dict {mem['bytes_per_entry_20k_unbounded']}. Store load of 50k entries (median "
           f"of 5): LFU {mem['load_50k_ms_lfu_median']} ms, LRU {mem['load_50k_ms_lru_median']} ms."]
    save(args.out, "ngram-cache", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
