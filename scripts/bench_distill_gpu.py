"""`omnidraft distill --device cuda` at the catalog pair's real shapes, timed on a GPU (#54): the
job's own functions (batched greedy answers and teacher records for the records stage; the
offline trainer, LoRA + acceptance head, and the held-out acceptance checks for the training
stage) on the 1.5B target's and the drafter's architectures with random weights (a lent GPU
machine takes 64 MiB a call: the corpus and the CPU-made records travel, the weights cannot),
against the same stages of the CPU run that made the shipped adapter (its report.json).

Random weights time what real ones would: a batch's generation runs to its longest answer (real
answers average ~190 of the 256 tokens; a random target rarely stops, so its batches run all
256: the records time here is an upper bound), and training reads the CPU-made real records.
Acceptance figures are the CPU job's; nothing here judges an adapter.

Two steps, the first here, the second on the GPU machine:
  python scripts/bench_distill_gpu.py --pack .devcarry/bundle --home /tmp/d15home --target qwen2.5-coder-1.5b
  python scripts/bench_distill_gpu.py --bundle .devcarry/bundle --out bench/results
Writes <out>/distill-gpu-<stamp>.{json,md}.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
from pathlib import Path

SWEEP = (1, 8, 32, 64, 128)  # prompts per batched generation, timed on the first prompts at SWEEP_TOKENS
SWEEP_TOKENS = 64


def pack(bundle: Path, home: str, target: str, drafter: str) -> None:
    """The bundle: the corpus prompts the CPU run answered, both models' configs and tokenizers,
    its records (gzip) and its report."""
    import os

    os.environ["OMNIDRAFT_HOME"] = home
    from omnidraft.jobs.distill import DistillConfig
    from omnidraft.models.catalog import model_dir, tokenizer_dir
    from omnidraft.pairs.spec import pair_dir, pair_name
    from omnidraft.train.corpus import corpus

    d = pair_dir(pair_name(drafter, target)) / "distill"
    report = json.loads((d / "report.json").read_text())
    cfg = report["config"]
    if {k: cfg[k] for k in ("answer_tokens", "heldout")} != {"answer_tokens": DistillConfig().answer_tokens,
                                                             "heldout": list(DistillConfig().heldout)}:
        raise SystemExit(f"{d} was made with other options than the job's defaults")
    shutil.rmtree(bundle, ignore_errors=True)
    bundle.mkdir(parents=True)
    prompts = [{"prompt": s.prompt, "chat": s.chat, "source": s.source} for s in corpus(cfg["code"], cfg["chat"])]
    (bundle / "prompts.json").write_text(json.dumps(prompts))
    (bundle / "cpu_report.json").write_text(json.dumps(report))
    with open(d / "records.sqlite", "rb") as src, gzip.open(bundle / "records.sqlite.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    for role, name in (("target", target), ("drafter", drafter)):
        out = bundle / role
        out.mkdir()
        shutil.copy(model_dir(name) / "config.json", out / "config.json")
        for f in Path(tokenizer_dir(name)).iterdir():
            if f.name.startswith("tokenizer") or f.name == "chat_template.jinja":
                shutil.copy(f, out / f.name)
    print(f"{bundle}: {len(prompts)} prompts, {sum(f.stat().st_size for f in bundle.rglob('*') if f.is_file()) >> 20} MiB")


def _sync() -> float:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def records_stage(bundle: Path, prompts: list[dict], tokens: int, device: str, log) -> dict:
    """The records stage as the job runs it on a GPU, at the target's shape: GPU_BATCH prompts
    per batched greedy generation, then one teacher call per record; and the batch-size sweep."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from omnidraft.decode.text import encode_prompt, model_eos_ids, stop_ids
    from omnidraft.jobs.distill import GPU_BATCH, TOPK
    from omnidraft.models.eager import CausalLM
    from omnidraft.train.teacher import greedy_answers, teacher_record
    from omnidraft.translate.state import PairState

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(bundle / "target")),
                                                 dtype=torch.bfloat16).eval()
    target = CausalLM(model, name="target")
    ttok, dtok = (AutoTokenizer.from_pretrained(str(bundle / r)) for r in ("target", "drafter"))
    dvocab = AutoConfig.from_pretrained(str(bundle / "drafter")).vocab_size
    pair = PairState(dtok, ttok, dvocab, target.vocab_size)
    stop = stop_ids(ttok, model_eos_ids(target))
    ids = [encode_prompt(ttok, p["prompt"], chat=p["chat"]) for p in prompts]
    greedy_answers(model, ids[:2], 4, stop)  # warm-up: kernels, allocator
    sweep = {}
    for b in SWEEP:
        n = min(max(b, 8), len(ids))  # batch 1 on the first 8 prompts, each other size on b prompts: per prompt
        t0 = _sync()
        for i in range(0, n, b):
            greedy_answers(model, ids[i:i + b], SWEEP_TOKENS, stop)
        sweep[b] = round((_sync() - t0) / n, 4)
        log(f"sweep: batch {b}: {sweep[b]:.3f} s a prompt ({SWEEP_TOKENS} tokens)")
    gen = teach = 0.0
    positions = 0
    for i in range(0, len(ids), GPU_BATCH):
        t0 = _sync()
        answers = greedy_answers(model, ids[i:i + GPU_BATCH], tokens, stop)
        t1 = _sync()
        for p, answer in zip(prompts[i:i + GPU_BATCH], answers):
            teacher_record(pair, target, p["prompt"], p["chat"], answer, TOPK)
            positions += len(answer)
        t2 = _sync()
        gen, teach = gen + t1 - t0, teach + t2 - t1
        log(f"records {min(i + GPU_BATCH, len(ids))}/{len(ids)}: generate {gen:.0f} s, teacher calls {teach:.0f} s")
    del model, target
    return {"prompts": len(ids), "batch": GPU_BATCH, "answer_tokens": tokens, "answer_positions": positions,
            "generate_s": round(gen, 1), "teacher_s": round(teach, 1), "seconds": round(gen + teach, 1),
            "sweep_s_per_prompt": sweep, "sweep_tokens": SWEEP_TOKENS}


def training_stage(bundle: Path, cpu_cfg: dict, device: str, records: int, log) -> dict:
    """The training stage as the job runs it, on the CPU run's records: the drafter's shape with
    random weights, LoRA + head with the job's defaults, the learning curve's held-out checks."""
    import tempfile

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from omnidraft.jobs.distill import DistillConfig
    from omnidraft.models.acceptance import AcceptanceHead
    from omnidraft.quiet import loading_quietly
    from omnidraft.train.offline import schedule, train
    from omnidraft.train.records import Record
    from omnidraft.train.trainer import attach_lora
    from omnidraft.train.tuning import RoundConfig, match_hits
    from omnidraft.train.verlog import VerificationLog

    cfg = DistillConfig(code=cpu_cfg["code"], chat=cpu_cfg["chat"], epochs=cpu_cfg["epochs"])
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "records.sqlite"
        with gzip.open(bundle / "records.sqlite.gz", "rb") as src, open(db, "wb") as dst:
            shutil.copyfileobj(src, dst)
        log_db = VerificationLog(db, max_bytes=1 << 40)
        rows = {i: data for i, _p, data in log_db.read("corpus", limit=records or 10**9) if data}
        held = [Record.from_bytes(data) for _i, _p, data in log_db.read("heldout", limit=10**9)]
        log_db.close()
        torch.manual_seed(0)
        with torch.device(device):
            base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(bundle / "drafter")),
                                                    dtype=torch.float32)
        with loading_quietly():
            model = attach_lora(base, cfg.train)
        head = AcceptanceHead(base.config.hidden_size, cfg.head.width).to(device)
        order = schedule(sorted(rows), cfg.epochs, cfg.train.update_interval)
        t0 = _sync()
        match_hits(model, held, cfg.train.max_tokens)
        check = _sync() - t0
        every = max(1, len(order) // 8)

        def progress(p) -> None:
            if p.done % every < cfg.train.update_interval or p.done == p.total:
                log(f"training {p.done}/{p.total}: {p.seconds:.0f} s")

        done = train(model, head, order, rows.__getitem__, Path(tmp) / "checkpoint.pt",
                     RoundConfig(train=cfg.train, head=cfg.head), cfg.checkpoint_every, on_progress=progress)
    return {"corpus_records": len(rows), "held_out_records": len(held), "updates": len(order),
            "train_s": round(done.seconds, 1), "heldout_check_s": round(check, 2),
            "curve_checks_s": round(check * (cfg.curve_points + 1), 1),
            "seconds": round(done.seconds + check * (cfg.curve_points + 1), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pack", type=Path, help="write the bundle here (on this machine) and stop")
    ap.add_argument("--home", help="--pack: the OMNIDRAFT_HOME whose distill run is the CPU reference")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--drafter", default="smollm2-135m")
    ap.add_argument("--bundle", type=Path, help="time the stages on this machine's GPU from this bundle")
    ap.add_argument("--prompts", type=int, default=0, help="records stage: the first N prompts (0: all)")
    ap.add_argument("--records", type=int, default=0, help="training stage: the first N corpus records (0: all)")
    ap.add_argument("--tokens", type=int, default=0, help="answer tokens (0: the CPU run's; a smoke test)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test of this script")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    if args.pack:
        if not args.home:
            ap.error("--pack needs --home")
        return pack(args.pack, args.home, args.target, args.drafter)
    if not args.bundle:
        ap.error("give --pack DIR (here) or --bundle DIR (on the GPU machine)")
    import torch

    if args.device != "cpu" and not torch.cuda.is_available():
        ap.error("torch sees no CUDA device here")
    from omnidraft.measure.report import table, write
    from omnidraft.measure.stamp import stamp

    def log(msg: str) -> None:
        print(f"[distill-gpu] {msg}", file=sys.stderr, flush=True)

    cpu = json.loads((args.bundle / "cpu_report.json").read_text())
    prompts = json.loads((args.bundle / "prompts.json").read_text())
    prompts = prompts[:args.prompts] if args.prompts else prompts
    gpu_name = torch.cuda.get_device_name(0) if args.device != "cpu" else "none (cpu smoke test)"
    rec = records_stage(args.bundle, prompts, args.tokens or cpu["config"]["answer_tokens"], args.device, log)
    trn = training_stage(args.bundle, cpu["config"], args.device, args.records, log)
    cpu_rec = cpu["records"]["seconds"] * len(prompts) / (cpu["records"]["corpus"] + cpu["records"]["heldout"])
    cpu_trn = cpu["train_seconds"] * trn["updates"] / cpu["updates"]
    reference = {"records_s": cpu["records"]["seconds"], "records": cpu["records"], "train_s": cpu_trn,
                 "cpu_seconds_this_run": cpu.get("cpu_seconds_this_run"), "config": cpu["config"]}
    report = stamp("distill-gpu", torch.get_num_threads(), gpu=gpu_name, cpu_reference=reference, records=rec,
                   training=trn)
    rows = [["records (greedy answers + teacher calls)", f"{len(prompts)} prompts",
             f"{cpu_rec:.0f}", f"{rec['seconds']:.0f}", f"{cpu_rec / max(rec['seconds'], 1e-9):.0f}x"],
            ["training (LoRA + head, 2 epochs)", f"{trn['updates']} records",
             f"{cpu_trn:.0f}", f"{trn['train_s']:.0f}", f"{cpu_trn / max(trn['train_s'], 1e-9):.0f}x"]]
    md = [f"GPU: {gpu_name}, torch {torch.__version__}. CPU reference: the run that made the shipped 1.5B adapter "
          f"(AMD EPYC, 2 cores, AVX-512, 2 threads; records by llama.cpp, training on torch; its report.json).",
          "Random weights of the real shapes on the GPU (the weights cannot travel to it; see the docstring): "
          "the records time is an upper bound (every answer runs its 256 tokens).", "",
          *table(["stage", "work", "CPU s (its run, scaled to this work)", "GPU s", "GPU speed-up"], rows), "",
          f"Records on the GPU: generation {rec['generate_s']} s + teacher calls {rec['teacher_s']} s, batches of "
          f"{rec['batch']}, {rec['answer_positions']} answer tokens (the CPU run's corpus: "
          f"{cpu['corpus_target_positions']} target positions). Training's held-out check: {trn['heldout_check_s']} s "
          f"each, {trn['curve_checks_s']} s for the curve's {cpu['config']['curve_points'] + 1}.", "",
          f"Batched greedy generation, seconds a prompt ({rec['sweep_tokens']} tokens):", "",
          *table(["batch", "s a prompt"], [[b, s] for b, s in rec["sweep_s_per_prompt"].items()])]
    write(args.out, "distill-gpu", "omnidraft distill on a GPU: the job's stages at the real shapes", report, md,
          keep=False)  # a device tool's report, outside the suites' history


if __name__ == "__main__":
    main()
