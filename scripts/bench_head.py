"""How well the acceptance head predicts what the target accepts (#54): a pair with a distilled
adapter drafts k tokens every round on held-out code and chat prompts (greedy, the target on its
program), the head scoring each draft token without stopping the draft; each round's verdict says
which drafts the target kept. Per draft position (rounds whose earlier drafts were all kept): the
head's mean P(accept) against the share kept; and a reliability table over every position (P in
bins: share kept). A head whose P runs above the share kept is overconfident: a stopping rule on it
(``SpecConfig(gamma=...)`` or ``priced=True``) drafts on where drafts will be rejected. Then what
stopping rules could buy, replayed on the same rounds and priced by the pair's cost model (a round
of n drafts commits min(kept, n) + 1 tokens, greedy): every fixed k, the head's product below
1 - gamma, the drafter's own probability of a draft below a threshold (``confidence``), and an
oracle that stops right after the last draft the target keeps (what a perfect head would buy).

  python scripts/bench_head.py --target qwen2.5-coder-1.5b --code 8 --chat 8
Writes bench/results/head-<stamp>.{json,md}.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BINS = (0.0, 0.5, 0.7, 0.85, 0.95, 1.0)
GAMMAS = (0.3, 0.5, 0.7)
CONFIDENCES = (0.3, 0.5, 0.7)


def replayed(rounds: list[tuple[list[float], list[float], int]], stop, model) -> float:
    """Tokens/s the cost model prices for ``rounds`` (head P's, drafter p's, drafts kept) had each
    drafted ``stop(head_p, draft_p, kept)`` tokens."""
    tokens = ms = 0.0
    for head_p, draft_p, kept in rounds:
        n = stop(head_p, draft_p, kept)
        tokens += min(kept, n) + 1
        ms += model.spent_ms(n + 1, n)
    return 1e3 * tokens / ms


def policies(k: int) -> dict:
    """name -> stop(head_p, draft_p, kept): how many of the k drafts a rule would have drafted
    (each signal's rule capped at every length from 3 to k: a wider verify call may cost a step)."""
    def head(gamma, cap):
        def stop(hp, _dp, _kept):
            prod = 1.0
            for i, p in enumerate(hp[:cap]):
                prod *= p
                if prod < 1 - gamma:
                    return i + 1
            return cap
        return stop

    def confidence(t, cap):
        return lambda _hp, dp, _kept: next((i + 1 for i, p in enumerate(dp[:cap]) if p < t), cap)

    caps = range(min(3, k), k + 1)
    return {**{f"fixed k = {n}": (lambda _hp, _dp, _kept, n=n: n) for n in range(1, k + 1)},
            **{f"head, gamma {g}, at most {c}": head(g, c) for c in caps for g in GAMMAS},
            **{f"drafter confidence {t}, at most {c}": confidence(t, c) for c in caps for t in CONFIDENCES},
            "oracle (stop after the last kept draft)": lambda _hp, _dp, kept: min(k, kept + 1)}


def kept_drafts(rnd) -> int:
    """Draft tokens the round's verdict kept whole: those before the draft the first rejected
    target id came from (spans map target ids to draft indices in order), or all it consumed."""
    spans, a = rnd.proposal.spans, rnd.verdict.accepted
    return spans[a][0] if a < len(spans) else (spans[-1][1] if spans else 0)


def main() -> int:
    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, k=False, max_new_tokens=64, target="qwen2.5-coder-1.5b")
    ap.add_argument("--version", default=None, help="the adapter version (default: the pair's latest)")
    ap.add_argument("--k", type=int, default=5, help="drafts per round")
    ap.add_argument("--code", type=int, default=8)
    ap.add_argument("--chat", type=int, default=8)
    ap.add_argument("--target-runtime", default="executorch")
    args = ap.parse_args()
    if not 1 <= args.k <= 8:
        ap.error(f"--k must be in 1..8, got {args.k}")
    benchsetup.start(args.threads)
    log = benchsetup.logger("head")

    from omnidraft import Runtime, Session, SpecConfig
    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_speculative
    from omnidraft.device.cpu import cpu_info

    s = Session(args.drafter, args.target, adapter=args.version or "latest",
                runtime=Runtime(target=args.target_runtime), log=False)
    if not s.has_head:
        print(f"bench_head: adapter {s.version} has no acceptance head", file=sys.stderr)
        return 2
    never = SpecConfig(stop_below=(0.0,))  # the head scores every draft; no draft stops early
    sets = {"code": [(p, False) for p, _ in benchsetup.prompt_mix(args.code, 0, code_start=40)],
            "chat": [(p, True) for p, _ in benchsetup.prompt_mix(0, args.chat, chat_start=10)]}
    scored: dict[str, list[tuple[list[float], list[float], int]]] = {}
    for name, prompts in sets.items():
        rounds: list[tuple[list[float], list[float], int]] = []
        for i, (prompt, chat) in enumerate(prompts):
            log(f"{name} {i + 1}/{len(prompts)}")
            s.new_conversation()
            generate_speculative(s.drafter, s.target, s.pair, prompt, cfg=never, k=FixedK(args.k),
                                 max_new_tokens=args.max_new_tokens, chat=chat, head=s.head,
                                 on_round=lambda r: r.kind == "drafter" and r.proposal.accept_p and rounds.append(
                                     (list(r.proposal.accept_p), list(r.proposal.draft_p), kept_drafts(r))))
        scored[name] = rounds

    positions, reliability, replays = [], [], []
    model = s.draft_length.model
    for name, rounds in scored.items():
        whole = [r for r in rounds if len(r[0]) == args.k]  # rounds that drafted all k (room left)
        for rule, stop in policies(args.k).items():
            replays.append({"set": name, "rule": rule, "rounds": len(whole),
                            "tokens_per_s": round(replayed(whole, stop, model), 2)})
        for i in range(args.k):
            reached = [(p[i], kept > i) for p, _dp, kept in rounds if len(p) > i and kept >= i]
            if reached:
                positions.append({"set": name, "position": i + 1, "rounds": len(reached),
                                  "mean_p": round(sum(p for p, _ in reached) / len(reached), 3),
                                  "kept": round(sum(k for _, k in reached) / len(reached), 3)})
        pooled = [(p[i], kept > i) for p, _dp, kept in rounds for i in range(len(p)) if kept >= i]
        for lo, hi in zip(BINS, BINS[1:]):
            inside = [(p, k) for p, k in pooled if lo <= p < hi or (hi == 1.0 and p == 1.0)]
            if inside:
                reliability.append({"set": name, "p_from": lo, "p_to": hi, "drafts": len(inside),
                                    "mean_p": round(sum(p for p, _ in inside) / len(inside), 3),
                                    "kept": round(sum(k for _, k in inside) / len(inside), 3)})

    cpu = cpu_info()
    report = benchio.stamp_report(drafter=args.drafter, target=args.target, version=s.version, cpu=cpu,
                                  threads=args.threads, k=args.k, max_new_tokens=args.max_new_tokens,
                                  positions=positions, reliability=reliability, replays=replays,
                                  cost_model=model.to_dict())
    md = [f"{args.drafter} -> {args.target}, adapter {s.version}, greedy, k = {args.k} every round, "
          f"{args.max_new_tokens} new tokens, target on {s.target_runtime}. "
          f"CPU: {benchio.cpu_line(cpu, args.threads)}.",
          "", "Per draft position, rounds whose earlier drafts were all kept:", ""]
    md += benchio.table(["set", "position", "rounds", "head's mean P(accept)", "share kept"],
                        [[r["set"], r["position"], r["rounds"], r["mean_p"], r["kept"]] for r in positions])
    md += ["", "Reliability, every position pooled:", ""]
    md += benchio.table(["set", "head's P", "drafts", "mean P", "share kept"],
                        [[r["set"], f"[{r['p_from']}, {r['p_to']})", r["drafts"], r["mean_p"], r["kept"]]
                         for r in reliability])
    md += ["", "What stopping rules would buy on these rounds, priced by the pair's cost model (tokens/s of "
           f"decoding; drafter {model.drafter_ms:.1f} ms a token, v(1) {model.v(1):.1f} ms):", ""]
    best = {n: max(r["tokens_per_s"] for r in replays if r["set"] == n and r["rule"].startswith("fixed"))
            for n in sets}
    md += benchio.table(["set", "rule", "rounds", "tokens/s", "vs the best fixed k"],
                        [[r["set"], r["rule"], r["rounds"], r["tokens_per_s"],
                          f"{r['tokens_per_s'] / best[r['set']]:.3f}"] for r in replays])
    benchio.save(args.out, "head", "The acceptance head against what the target kept", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
