"""Several clients at once on each server row: the serve suite's second phase. Each client is a
thread with conversations of its own (a conversation's turns in order, on one client); the rows
run one after the other, so a row is measured with only its own clients on the machine. Per row:
the requests' total tokens over the wall time from the first request to the last answer
(aggregate tokens/s), and each request's latency and first token (p50 / p95).

Knows rows and threads; nothing about what a row runs.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from omnidraft.bench.rows import Prompt
from omnidraft.measure.tally import Tally


def _conversation(p: Prompt) -> str:
    return p.earlier[0] if p.earlier else p.text


def clients_of(prompts: list[Prompt], clients: int) -> list[list[Prompt]]:
    """The prompts split among ``clients``: whole conversations, dealt in turn, each in its order."""
    keys = list(dict.fromkeys(_conversation(p) for p in prompts))
    return [[p for p in prompts if keys.index(_conversation(p)) % clients == c] for c in range(clients)]


def run_concurrently(rows: list, prompts: list[Prompt], clients: int, max_new_tokens: int,
                     log: Callable[[str], None]) -> dict:
    """Row name -> its figures with ``clients`` clients at once (rows one after the other)."""
    shares = clients_of(prompts, clients)
    out = {}
    for row in rows:
        tally, lock, failed = Tally(), threading.Lock(), []

        def client(share: list[Prompt]) -> None:
            try:
                for p in share:
                    got = row.run(p, max_new_tokens)
                    with lock:
                        got.into(tally)
            except Exception as err:  # a client's failure is the row's result, not a hung thread
                failed.append(f"{type(err).__name__}: {err}")

        threads = [threading.Thread(target=client, args=(s,), daemon=True) for s in shares if s]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        s = tally.summary()
        out[row.name] = {"clients": len(threads), "requests": tally.prompts, "tokens": tally.tokens,
                         "wall_s": round(wall, 3), "aggregate_tokens_per_s": round(tally.tokens / wall, 2),
                         "latency_p50_s": s["latency_p50_s"], "latency_p95_s": s["latency_p95_s"],
                         "first_token_s": s["first_token_s"], "failed": failed}
        log(f"{len(threads)} clients: {row.name} {out[row.name]['aggregate_tokens_per_s']} tokens/s "
            f"(p50 {s['latency_p50_s']} s, p95 {s['latency_p95_s']} s)" + (f", {len(failed)} failed" if failed else ""))
    return out
