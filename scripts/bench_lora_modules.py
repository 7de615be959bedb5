"""Which drafter modules the pre-adapted LoRA should cover (#54): on the records `omnidraft distill`
stored for a pair (the target's greedy answers to corpus prompts; held-out prompts never in it),
train one adapter per module set exactly as distill trains (same records, same schedule, loss and
head) and report each one's held-out teacher-forced acceptance on code and on chat, with its
position-by-position wins and losses against the zero adapter and against the first set. With
--adapter NAME=DIR, a trained adapter (a peft folder: the shipped one, a published version) is
judged beside them. With --programs DIR, also what a module set costs on every draft: the
drafter's program with that set's LoRA slots (as `omnidraft export --drafter D --quant 8da8w`
builds it; exported into DIR when missing, ~9 min each on 2 cores), ms a token (a one-token call
after a 64-token prefill: the best of 12 interleaved rounds' medians, as bench_drafter times).

Trainings resume from --work (a checkpoint per set, as distill's), so a killed run goes on.

  omnidraft distill --target qwen2.5-coder-1.5b --code 40 --chat 40 --no-publish \\
    && python scripts/bench_lora_modules.py --target qwen2.5-coder-1.5b --code 40 --chat 40 \\
    --programs /tmp/omnidraft-lora-modules/programs \\
    --adapter shipped=adapters/pretrained/smollm2-135m--qwen2.5-coder-1.5b
Writes bench/results/lora-modules-<stamp>.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_drafter import token_ms  # noqa: E402

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
CONTEXT = 64  # ids in the cache when a program's one-token call is timed
SETS = {"attention": ATTENTION, "attention + MLP": ATTENTION + ("gate_proj", "up_proj", "down_proj")}


def named(pairs: list[str]) -> dict[str, str]:
    out = {}
    for item in pairs:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise SystemExit(f"bench_lora_modules: expected NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def slug(name: str) -> str:
    return name.replace(" ", "").replace("+", "-")


def held_out(log) -> dict[str, list]:
    """The stored held-out records by set: record ``heldout/<n>`` is distill's n-th held-out prompt."""
    from omnidraft.jobs.distill import DistillConfig
    from omnidraft.train.corpus import heldout
    from omnidraft.train.records import Record

    prompts = heldout(*DistillConfig().heldout)  # [(text, chat)]
    out: dict[str, list] = {"code": [], "chat": []}
    for _i, p, data in log.read("heldout", limit=10**9):
        out["chat" if prompts[int(p.split("/")[1])][1] else "code"].append(Record.from_bytes(data))
    return out


def program(drafter: str, modules: tuple[str, ...], folder: Path, log) -> Path:
    """The drafter's default program (8da8w, 1,024 slots) with LoRA slots on ``modules``, exported
    into ``folder`` unless it is there."""
    from omnidraft.export.lower import ExportConfig, export_drafter, scheme_fields
    from omnidraft.models.loading import load_model
    from omnidraft.pairs.programs import DRAFTER_QUANT, MAX_SEQ

    if not (folder / "program.pte").is_file():
        log(f"exporting {drafter} with LoRA on {', '.join(modules)} to {folder}")
        cfg = ExportConfig(drafter=drafter, **scheme_fields(DRAFTER_QUANT), max_seq=MAX_SEQ, lora_targets=modules)
        export_drafter(load_model(drafter, dtype="fp32").model, folder, cfg, log=log)
    return folder


def paired(before, after) -> tuple[int, int, float]:
    """(positions ``after`` gets right and ``before`` not, the reverse, their z score), counted as the
    daemon's guard counts them."""
    from omnidraft.train.guard import judge

    v = judge(before, after)
    return v.wins, v.losses, round((v.wins - v.losses) / math.sqrt(max(v.wins + v.losses, 1)), 2)


def cell(counts: tuple[int, int, float]) -> str:
    """A table cell for ``paired``'s counts: "wins / losses (z)"."""
    return f"{counts[0]} / {counts[1]} ({counts[2]:+.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--drafter", default="smollm2-135m")
    ap.add_argument("--code", type=int, default=40, help="corpus code records trained on (stored by distill)")
    ap.add_argument("--chat", type=int, default=40, help="corpus chat records trained on")
    ap.add_argument("--set", nargs="+", default=[f"{k}={','.join(v)}" for k, v in SETS.items()],
                    help="NAME=module,module...: a module set (the first is the one the others are compared to)")
    ap.add_argument("--adapter", nargs="*", default=[], help="NAME=DIR: a trained adapter (peft folder) to judge too")
    ap.add_argument("--programs", default=None, help="a folder for each set's drafter program: export (when "
                    "missing) and time them")
    ap.add_argument("--work", default="/tmp/omnidraft-lora-modules", help="checkpoints (a run resumes from them)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    from omnidraft.device.threads import configure_process

    configure_process()
    import benchio
    import benchsetup

    benchsetup.start(args.threads)
    import torch
    from peft import PeftModel

    from omnidraft.jobs.distill import DistillConfig
    from omnidraft.models.acceptance import AcceptanceHead
    from omnidraft.models.loading import load_model
    from omnidraft.device.cpu import cpu_info
    from omnidraft.pairs.spec import pair_dir, pair_name
    from omnidraft.quiet import loading_quietly
    from omnidraft.train.corpus import corpus
    from omnidraft.train.offline import schedule, train
    from omnidraft.train.trainer import attach_lora
    from omnidraft.train.tuning import RoundConfig, match_hits
    from omnidraft.train.verlog import VerificationLog

    log_ = benchsetup.logger("lora-modules")
    sets = {name: tuple(mods.split(",")) for name, mods in named(args.set).items()}
    missing = [d for d in named(args.adapter).values() if not (Path(d) / "adapter_config.json").is_file()]
    if missing:
        raise SystemExit(f"bench_lora_modules: no peft adapter (adapter_config.json) in {', '.join(missing)}")
    db = pair_dir(pair_name(args.drafter, args.target)) / "distill" / "records.sqlite"
    if not db.is_file():
        raise SystemExit(f"bench_lora_modules: no distill records at {db}: run `omnidraft distill` first")
    log = VerificationLog(db, max_bytes=1 << 40)
    asked = {s.source for s in corpus(args.code, args.chat)}
    rows = {i: data for i, p, data in log.read("corpus", limit=10**9) if data and p in asked}
    held = held_out(log)
    if len(rows) < len(asked):
        raise SystemExit(f"bench_lora_modules: {len(rows)} of the {len(asked)} corpus records are stored: "
                         "run `omnidraft distill` with at least these --code and --chat first")
    base_cfg = DistillConfig(code=args.code, chat=args.chat)
    order = schedule(sorted(rows), base_cfg.epochs, base_cfg.train.update_interval)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    def judged(model) -> dict:
        model.eval()
        with torch.no_grad():
            return {s: match_hits(model, recs, base_cfg.train.max_tokens) for s, recs in held.items()}

    def lora_parameters(model) -> int:
        return sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)

    def drafter():
        return load_model(args.drafter, dtype="fp32").model

    with loading_quietly():
        hits = {"zero adapter": judged(attach_lora(drafter(), base_cfg.train))}  # B = 0: the drafter itself
    runs = {}
    for name, modules in sets.items():
        cfg = dataclasses.replace(base_cfg.train, target_modules=modules)
        with loading_quietly():
            model = attach_lora(drafter(), cfg)
        log_(f"training {name} ({len(order)} record-steps)")
        head = AcceptanceHead(model.config.hidden_size, base_cfg.head.width)
        done = train(model, head, order, rows.__getitem__, work / f"{slug(name)}.pt",
                     RoundConfig(train=cfg, head=base_cfg.head), base_cfg.checkpoint_every)
        runs[name] = {"modules": list(modules), "train_s": round(done.seconds, 1), "trainable": lora_parameters(model)}
        hits[name] = judged(model)
    for name, folder in named(args.adapter).items():
        with loading_quietly():
            model = PeftModel.from_pretrained(drafter(), folder).float()
        runs[name] = {"modules": sorted(model.peft_config["default"].target_modules), "train_s": "",
                      "adapter": folder, "trainable": lora_parameters(model)}
        hits[name] = judged(model)
    first = next(iter(sets))
    folders = {name: program(args.drafter, mods, Path(args.programs) / slug(name), log_)
               for name, mods in sets.items()} if args.programs else {}
    ms = {}
    if folders:
        from omnidraft.device.runtime import ExecuTorchLM

        best = token_ms([ExecuTorchLM(d) for d in folders.values()], list(folders), [CONTEXT], calls=24, reps=12)
        ms = {name: by_context[CONTEXT] for name, by_context in best.items()}
    header = ["adapter", "modules", "LoRA parameters", "training s", "code acceptance", "chat acceptance",
              "vs zero adapter: code wins / losses (z)", "chat", f"vs {first}: code", "chat"]
    table, report_rows = [], {}
    for name, h in hits.items():
        acc = {s: round(float(v.float().mean()), 4) for s, v in h.items()}
        vs_zero = {s: paired(hits["zero adapter"][s], h[s]) for s in h}
        vs_first = {s: paired(hits[first][s], h[s]) for s in h}
        run = runs.get(name, {"modules": [], "train_s": "", "trainable": 0})
        report_rows[name] = {**run, "acceptance": acc, "positions": {s: int(v.numel()) for s, v in h.items()},
                             "vs_zero": vs_zero, "vs_first": vs_first}
        table.append([name, ", ".join(run["modules"]) or "-", run["trainable"], run["train_s"], acc["code"],
                      acc["chat"], *(cell(vs_zero[s]) for s in ("code", "chat")),
                      *(cell(vs_first[s]) if name not in ("zero adapter", first) else "" for s in ("code", "chat"))])
    cpu = cpu_info()
    report = benchio.stamp_report(drafter=args.drafter, target=args.target, cpu=cpu, threads=args.threads,
                                  code=args.code, chat=args.chat, record_steps=len(order), corpus_records=len(rows),
                                  rows=report_rows, program_ms_per_token=ms,
                                  programs={n: str(d) for n, d in folders.items()})
    md = [f"{args.drafter} -> {args.target}: LoRA trained as `omnidraft distill` trains, on its stored greedy "
          f"records of {args.code} code + {args.chat} chat corpus prompts ({len(order)} record-steps), judged by "
          "held-out teacher-forced acceptance (the drafter's argmax is the target's token) on distill's held-out "
          f"prompts: {len(held['code'])} code, {len(held['chat'])} chat. CPU: {benchio.cpu_line(cpu, args.threads)}.",
          "", *benchio.table(header, table)]
    if ms:
        md += ["", f"Drafter program, ms a token (a one-token call at {CONTEXT} ids of context: the best of 12 "
               "interleaved rounds' medians of 24 calls):",
               "", *benchio.table(["program", "directory", "ms / token"],
                                  [[n, d, ms[n]] for n, d in folders.items()])]
    benchio.save(args.out, "lora-modules", "LoRA on which drafter modules (#54)", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
