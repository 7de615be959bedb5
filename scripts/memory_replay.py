"""Replay the memory suite's held-out work on recorded answers, to compare ways of pricing a recall
without timing a model: the real Speculator, CostModelK (from the pair's cost.json: its timed v(n),
drafter cost and acceptance) and SuffixIndex; a simulated drafter that keeps each draft position
at the pair's measured rate (the same draws at the same place in every run); each round costs
the timed terms of its width and drafts. Predicted tokens/s, cold (no memory) against after the
stream, per held-out set. An estimate for choosing a policy: `omnidraft bench memory` measures.

Two steps (the first generates with llama.cpp: ~13 min for the 1.5B on 2 cores; llama-cpp-python needed):
  python scripts/memory_replay.py record --target qwen2.5-coder-1.5b --out /tmp/answers.json
  python scripts/memory_replay.py replay --target qwen2.5-coder-1.5b --answers /tmp/answers.json
Recorded: the suite's stream (omnidraft/recurring.py, 40 of each kind) and held-out sets (6 each of
tests, extract, reply, code, sharegpt), greedy, 96 tokens, in the target's ids.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

SETS = {"tests": 6, "extract": 6, "reply": 6, "code": 6, "sharegpt": 6}
RECURRING, UNRELATED = ("tests", "extract", "reply"), ("code", "sharegpt")


def record(target: str, out: Path, tokens: int) -> None:
    import llama_cpp

    from omnidraft.bench.prompts import prompt_sets
    from omnidraft.decode.text import encode_prompt
    from omnidraft.models.catalog import ensure_gguf
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.recurring import mixed

    tok = load_tokenizer(target)
    llm = llama_cpp.Llama(model_path=str(ensure_gguf(target)), n_ctx=2048, n_threads=2, n_threads_batch=2,
                          verbose=False)
    stops = {tok.eos_token_id, *(tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>"))}
    items = [("stream", p, True) for p in mixed(40)] + [(p.set, p.text, p.chat) for p in prompt_sets(SETS)]
    answers, t0 = [], time.time()
    for i, (kind, text, chat) in enumerate(items, 1):
        ids = encode_prompt(tok, text, chat=chat)
        answer: list[int] = []
        for t in llm.generate(ids, temp=0.0, top_k=1, reset=True):
            if t in stops or len(answer) == tokens:
                break
            answer.append(int(t))
        answers.append({"kind": kind, "prompt": ids, "answer": answer})
        print(f"{i}/{len(items)} {kind}: {len(answer)} tokens ({time.time() - t0:.0f} s)", flush=True)
    out.write_text(json.dumps(answers))


class _Ctx:  # the drafter's context: nothing to translate back in a replay
    def append_target(self, ids: list[int]) -> None:
        pass


class _Drafter:
    """Keeps draft position i with the pair's rate ``rates[i]``, drawn once per (seed, answer, place)."""

    kind = "drafter"

    def __init__(self, rates: list[float], seed: int):
        self.rates, self.seed, self.truth = rates, seed, []

    def propose(self, state, k: int):
        from omnidraft.translate.proposal import Proposal

        at = len(state.generated)
        draw = random.Random(f"{self.seed}:{self.truth[:8]}:{len(self.truth)}:{at}")
        kept = 0
        while kept < min(k, len(self.truth) - at) and draw.random() < self.rates[min(kept, len(self.rates) - 1)]:
            kept += 1
        proposal = Proposal.direct(self.truth[at:at + kept] + [-1] * (k - kept))  # -1: an id never right
        proposal.drafter_forwards = k
        return proposal

    def observe(self, state, fresh: int) -> None:
        pass

    def unread(self, state) -> int:
        return 0


class _Memory:
    """The memory's index over the answers added so far, as memory/spaces.py's Memory asks it."""

    def __init__(self):
        from omnidraft.memory.config import MemoryConfig
        from omnidraft.memory.index import SuffixIndex

        self.cfg = MemoryConfig()
        self.index, self.n = SuffixIndex(self.cfg), 0

    def find(self, context: list[int], span: int):
        return self.index.find(context[-self.cfg.max_match:], span)

    def verified_by(self, recall, accepted: int) -> None:
        pass

    def add(self, ids: list[int]) -> None:
        self.n += 1
        self.index.add([(self.n, ids)])


def _run(items: list[dict], k, model, memory, drafter: _Drafter, totals: dict, remember: bool) -> None:
    from omnidraft.decode.speculator import Speculator
    from omnidraft.propose.lookup import ContextIndex

    for item in items:
        prompt, truth = item["prompt"], item["answer"]
        drafter.truth = truth
        spec = Speculator(drafter, _Ctx(), prompt, k, lookup=ContextIndex(), memory=memory)
        k.start()
        ms = 0.0
        tally = totals.setdefault(item["kind"], {"tokens": 0, "ms": 0.0, "rounds": {}})
        while len(spec.state.generated) < len(truth):
            at = len(spec.state.generated)
            plan = spec.plan(len(truth) - at - 1, len(truth) - at)
            ids = plan.proposal.target_ids
            kept = next((i for i, t in enumerate(ids) if at + i >= len(truth) or t != truth[at + i]), len(ids))
            new = truth[at:at + kept + 1]
            spec.verdict(plan, kept, new[-1] if len(new) > kept else -1)
            spec.commit(plan, new)
            round_ms = model.round_ms(plan.width, plan.proposal.drafter_forwards, plan.read)
            k.observe_round(plan.width, plan.proposal.drafter_forwards, plan.read, round_ms / 1e3)
            ms += round_ms
            r = tally["rounds"].setdefault(plan.kind, [0, 0, 0])
            r[0], r[1], r[2] = r[0] + 1, r[1] + len(ids), r[2] + kept
        tally["tokens"] += len(truth)
        tally["ms"] += ms
        if remember and memory is not None:
            memory.add(prompt + truth)


def replay(drafter: str, target: str, answers: Path, seeds: int) -> dict:
    """{"cold" | "memory": {set: {"tokens", "ms", "rounds": {kind: [rounds, proposed, kept]}}}}, summed
    over ``seeds`` runs of the drafter's draws."""
    from omnidraft.decode.draft_length import CostModelK
    from omnidraft.pairs.cost_store import read
    from omnidraft.pairs.spec import PairSpec, pair_dir

    items = json.loads(answers.read_text())
    stream = [i for i in items if i["kind"] == "stream"]
    held = [i for i in items if i["kind"] != "stream"]
    out = {"cold": {}, "memory": {}}
    for seed in range(seeds):
        for label in out:
            kept = read(pair_dir(PairSpec(drafter, target).name) / "cost.json")
            k = CostModelK(kept.model, kept.reached, kept.accepted)
            draft = _Drafter([a / n for a, n in zip(kept.accepted, kept.reached) if n > 1], seed)
            memory = _Memory() if label == "memory" else None
            _run(stream, k, kept.model, memory, draft, {}, remember=True)  # the stream teaches the cost model too
            _run(held, k, kept.model, memory, draft, out[label], remember=False)
    return out


def _report(out: dict) -> None:
    def speed(label: str, sets) -> float:
        rows = [out[label][s] for s in sets]
        return 1e3 * sum(r["tokens"] for r in rows) / sum(r["ms"] for r in rows)

    for s in (*RECURRING, *UNRELATED):
        rounds = " ".join(f"{kind} {n} rounds {kept}/{proposed}" for kind, (n, proposed, kept)
                          in sorted(out["memory"][s]["rounds"].items()))
        print(f"{s:9s} cold {speed('cold', [s]):6.2f}  memory {speed('memory', [s]):6.2f} tokens/s  "
              f"{speed('memory', [s]) / speed('cold', [s]):.2f}x  ({rounds})")
    for name, sets in (("recurring", RECURRING), ("unrelated", UNRELATED)):
        print(f"{name}: {speed('memory', sets) / speed('cold', sets):.3f}x the cold pair")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("record", "replay"))
    ap.add_argument("--drafter", default="smollm2-135m")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--out", type=Path, help="record: where the answers go")
    ap.add_argument("--answers", type=Path, help="replay: the recorded answers")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--seeds", type=int, default=5, help="replay: runs of the simulated drafter's draws, summed")
    args = ap.parse_args()
    if args.step == "record" and args.out is None:
        ap.error("record needs --out FILE: where the answers go")
    if args.step == "replay" and (args.answers is None or not args.answers.is_file()):
        ap.error(f"replay needs --answers FILE, the output of record (got {args.answers})")
    if args.step == "record":
        record(args.target, args.out, args.tokens)
    else:
        _report(replay(args.drafter, args.target, args.answers, args.seeds))


if __name__ == "__main__":
    main()
