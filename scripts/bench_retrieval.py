"""Would a retrieval proposer learn from use where the drafter does not? (#20) A simulation, no model
runs: over a usage run's training records (scripts/bench_usage.py's verification log, drafter
tokens), the last --held records' generations are replayed greedily against a suffix-match
proposer. At each round it looks up the longest suffix (--min-match .. 8 tokens) of the context in
the earlier records (what the stream taught) and in the record's own prompt and output so far
(prompt lookup), proposes the next --k tokens that followed it, and accepts the prefix the target
actually generated. One target forward per round, as in the pair.

  python scripts/bench_retrieval.py --verlog <usage home>/verlog.sqlite
Writes bench/results/retrieval-<stamp>.{json,md}.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
MAX_MATCH = 8


def add(out: dict, s: list[int], ends: range, min_match: int) -> None:
    """Index the n-grams (min_match..MAX_MATCH tokens) of ``s`` ending before each position in
    ``ends``: n-gram -> (s, the position after it); a later occurrence replaces an earlier one."""
    for j in ends:
        for n in range(min_match, min(MAX_MATCH, j) + 1):
            out[tuple(s[j - n:j])] = (s, j)


def replay(ids: list[int], start: int, store: dict, k: int, min_match: int) -> dict:
    """Rounds of the suffix-match proposer over ids[start:]: counts per source. The record's own
    n-grams are indexed as the context grows; a continuation found there stops at the context."""
    c = {"rounds": 0, "tokens": 0, "store_rounds": 0, "store_accepted": 0, "own_rounds": 0, "own_accepted": 0}
    own: dict = {}
    i = indexed = start
    add(own, ids, range(1, start), min_match)
    while i < len(ids):
        add(own, ids, range(max(indexed, 1), i), min_match)
        indexed = i
        found = None
        for n in range(min(MAX_MATCH, i), min_match - 1, -1):
            key = tuple(ids[i - n:i])
            for where, idx in (("own", own), ("store", store)):
                hit = idx.get(key)
                if hit:
                    seq, j = hit
                    found = where, seq[j:min(j + k, i) if where == "own" else j + k]
                    break
            if found:
                break
        accepted = 0
        if found:
            for a, b in zip(found[1], ids[i:]):
                if a != b:
                    break
                accepted += 1
            c[f"{found[0]}_rounds"] += 1
            c[f"{found[0]}_accepted"] += accepted
        c["rounds"] += 1
        c["tokens"] += accepted + 1
        i += accepted + 1
    return c


def main() -> None:
    from benchio import save, stamp_report, table

    from omnidraft.train.records import Record

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verlog", required=True, help="a usage run's verlog.sqlite")
    ap.add_argument("--held", type=int, default=60, help="the last N records are replayed; the rest is the store")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--min-match", default="3,5,8", help="shortest suffix looked up, comma-separated settings")
    ap.add_argument("--out", default=str(HERE.parent / "bench" / "results"))
    args = ap.parse_args()
    if not Path(args.verlog).is_file():
        sys.exit(f"bench_retrieval: no verification log at {args.verlog} (a usage run's <home>/verlog.sqlite)")
    rows = sqlite3.connect(args.verlog).execute("SELECT data FROM records ORDER BY id").fetchall()
    records = [Record.from_bytes(r[0]) for r in rows]
    if len(records) <= args.held:
        sys.exit(f"bench_retrieval: {args.verlog} holds {len(records)} records, need more than --held {args.held}")
    earlier, held = records[:-args.held], records[-args.held:]
    results = []
    for m in (int(x) for x in args.min_match.split(",")):
        store: dict = {}
        for r in earlier:
            seq = r.draft_ids.tolist()
            add(store, seq, range(1, len(seq)), m)
        total: dict = {}
        for r in held:
            for key, v in replay(r.draft_ids.tolist(), r.gen_start, store, args.k, m).items():
                total[key] = total.get(key, 0) + v
        results.append({"min_match": m, **total})
    report = stamp_report(verlog=args.verlog, records=len(records), held=args.held, k=args.k, results=results)
    out_rows = []
    for r in results:
        def share(src):
            n = r[f"{src}_rounds"]
            return f"{n / r['rounds']:.1%}", f"{r[f'{src}_accepted'] / max(n, 1):.2f}"
        out_rows.append([r["min_match"], f"{r['tokens'] / r['rounds']:.3f}", *share("store"), *share("own")])
    md = [f"{len(earlier)} earlier records as the store, the last {args.held} replayed (greedy target outputs, "
          f"drafter tokens), k = {args.k}; rounds without a match count one token (the target alone).", "",
          *table(["shortest match", "tokens per target forward", "rounds proposed from the stream",
                  "accepted per such round", "rounds proposed by prompt lookup", "accepted per such round"],
                 out_rows), "", f"`{report['command']}`"]
    save(args.out, "retrieval", "A suffix-match proposer replayed over a usage stream's records", report, md)


if __name__ == "__main__":
    main()
