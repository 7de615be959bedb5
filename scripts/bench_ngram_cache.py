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

import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from benchio import Tally, save, stamp_report, table
from benchsetup import load_models, logger, parser, prompt_mix, start


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
    ap = parser(__doc__, target="qwen2.5-coder-1.5b", dtype="--dtype")
    ap.add_argument("--humaneval", type=int, default=10)
    ap.add_argument("--chat", type=int, default=8)
    args = ap.parse_args(argv)

    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.propose.config import SpecConfig

    log = logger()
    start(args.threads)
    test = prompt_mix(args.humaneval, args.chat)
    warm = prompt_mix(args.humaneval, args.chat, code_start=100, chat_start=args.chat)
    models = load_models(args.drafter, args.target, drafter_dtype=args.dtype, target_dtype=args.dtype)
    target = LocalTarget(models.target)  # greedy
    report = stamp_report(drafter=args.drafter, target=args.target, dtype=args.dtype, k=args.k,
                          max_new_tokens=args.max_new_tokens, test_prompts=[p for p, _ in test],
                          warmup_prompts=[p for p, _ in warm], memory=memory_and_load(), rows=[])
    log(json.dumps(report["memory"]))

    def run(name, pair, learn, prompts=test):
        cfg = SpecConfig("omnidraft", learn_ngrams=learn)
        t = Tally()
        for p, chat in prompts:
            t.add(generate_speculative(models.drafter, target, pair, p, cfg=cfg, k=FixedK(args.k), chat=chat,
                                       max_new_tokens=args.max_new_tokens).metrics)
        row = {"config": name, "entries": len(pair.cache), "seeded": pair.cache.seeded,
               "learned": pair.cache.learned, "evictions": pair.cache.evictions,
               "acceptance_rate": t.acceptance_rate(),
               "ngram_hits_per_step": round(t.ngram / max(t.steps, 1), 3),
               "tokens_per_s": t.tokens_per_s()}
        if prompts is test:
            report["rows"].append(row)
            log(json.dumps(row))
        return row

    run("no cache", models.pair(seed_ngrams=False), learn=False)
    run("online only (unbounded)", models.pair(seed_ngrams=False, policy="unbounded", max_bytes=None), learn=True)
    run("seeded only (unbounded)", models.pair(policy="unbounded", max_bytes=None), learn=False)
    with tempfile.TemporaryDirectory() as d:
        store = Path(d) / "ngrams.sqlite"
        warm_pair = models.pair(policy="lfu", max_bytes=None, max_entries=10**7, store_path=store)
        run("warm-up", warm_pair, learn=True, prompts=warm)
        warm_pair.save()
        full = models.pair(policy="lfu", max_bytes=None, max_entries=10**7, store_path=store)
        size = len(full.cache)
        run("seeded + online (full)", full, learn=True)
        report["full_size"] = size
        for policy in ("lru", "lfu"):
            for frac in (4, 2):
                bounded = models.pair(policy=policy, max_bytes=None, max_entries=size // frac, store_path=store)
                run(f"{policy.upper()} at 1/{frac} ({size // frac} entries)", bounded, learn=True)
                bounded.store.close()
    mem = report["memory"]
    md = [f"{args.drafter} -> {args.target}, {args.dtype}, omnidraft k={args.k}, greedy, "
          f"{len(test)} test prompts ({args.humaneval} HumanEval + {args.chat} chat), "
          f"{args.max_new_tokens} new tokens; `{report['command']}`", ""]
    md += table(["config", "entries", "seeded", "learned", "evictions", "acceptance", "n-gram hits/step", "tokens/s"],
                [[r["config"], r["entries"], r["seeded"], r["learned"], r["evictions"], r["acceptance_rate"],
                  r["ngram_hits_per_step"], r["tokens_per_s"]] for r in report["rows"]])
    md += ["", "Memory (tracemalloc, 20k entries, bytes/entry): "
           f"LFU {mem['bytes_per_entry_20k_lfu']}, LRU {mem['bytes_per_entry_20k_lru']}, "
           f"plain dict {mem['bytes_per_entry_20k_unbounded']}. Store load of 50k entries (median "
           f"of 5): LFU {mem['load_50k_ms_lfu_median']} ms, LRU {mem['load_50k_ms_lru_median']} ms."]
    save(args.out, "ngram-cache", "N-gram cache benchmark", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
