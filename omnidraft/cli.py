"""The `omnidraft` command: parses argv and dispatches to library functions, nothing more.

User errors (OmniDraftError) print as one line on stderr with exit code 2; Ctrl-C exits 130.
"""

from __future__ import annotations

import json
import os
import sys

from omnidraft.cli_args import build_parser
from omnidraft.errors import OmniDraftError

def _cmd_pair(args) -> int:
    from omnidraft.device.threads import set_threads
    from omnidraft.jobs.pairing import format_report, pair

    set_threads(args.threads)
    report = pair(_target_ref(args), args.drafter, reset=args.reset, calibration_s=args.calibration_seconds,
                  max_new_tokens=args.max_new_tokens, llamacpp=not args.no_llamacpp,
                  target_runtime=args.target_runtime, exact=args.exact)
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def _cmd_distill(args) -> int:
    from omnidraft.device.threads import set_threads
    from omnidraft.jobs.distill import DistillConfig, distill

    cfg = DistillConfig(code=args.code, chat=args.chat, source=args.source, answer_tokens=args.answer_tokens,
                        epochs=args.epochs, device=args.device)
    set_threads(args.threads)
    report = distill(args.target, args.drafter, cfg, target_runtime=args.target_runtime, restart=args.restart,
                     publish=not args.no_publish, say=lambda s: print(s, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(report))
        return 0
    verdict = (f"published {report['version']}" if report.get("version") else
               "not published (--no-publish)" if report["publish"] else "rejected by the guard, not published")
    print(f"{report['pair']}: {report['corpus_records']} corpus records ({report['corpus_target_positions']} target "
          f"positions), {report['updates']} records trained in {report['train_seconds'] / 60:.1f} min; held-out "
          f"teacher-forced acceptance {report['acceptance_before']:.3f} -> {report['acceptance_after']:.3f} "
          f"(p worse = {report['guard_p_worse']:.3g}): {verdict}")
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


def _cmd_memory(args) -> int:
    from omnidraft.memory.summary import describe, forget, summarize
    from omnidraft.pairs.spec import list_specs, pair_dir

    names = [s.name for s in list_specs()]
    if args.pair is not None and args.pair not in names:
        raise OmniDraftError(f"no pair named {args.pair!r}", "`omnidraft pairs` lists them")
    folders = {name: pair_dir(name) / "memory" for name in ([args.pair] if args.pair else names)}
    if not folders:
        print("no pairs yet: omnidraft pair --target NAME")
        return 0
    if args.action == "clear":
        for name, folder in folders.items():
            n = forget(folder, args.space)
            print(f"{name}: {'an unreadable memory removed' if n < 0 else f'{n} entries forgotten'}")
        return 0
    stats = {name: summarize(folder) for name, folder in folders.items()}
    print(json.dumps(stats) if args.json else "\n".join(describe(name, st) for name, st in stats.items()))
    return 0


def _cmd_daemon(args) -> int:
    from omnidraft.train import daemon

    if args.action == "run":
        code = daemon.serve(args.poll, args.once, cfg=daemon.load_config(args.config), throttle_s=args.throttle,
                            parent=args.parent)
        # its state is written and its log closed: skip the interpreter's teardown of torch (seconds
        # of CPU on a busy 2-core device, after a SIGTERM that asked it to end at once)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if args.action == "start":
        print(f"daemon running, pid {daemon.start(args.poll, args.throttle, args.config)}")
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
    from omnidraft.export.lower import ExportConfig, export_drafter, export_target, scheme_fields
    from omnidraft.device.threads import set_threads
    from omnidraft.models.loading import load_model
    from omnidraft.models.specvocab import load_ranker

    role = "target" if args.target else "drafter"
    name = args.target or args.drafter or "smollm2-135m"
    cfg = ExportConfig(drafter=name, **scheme_fields(args.quant), max_seq=args.max_seq, lora_rank=args.lora_rank,
                       lora_alpha=float(args.lora_rank), specvocab_k=args.specvocab_k, head_tokens=args.head_tokens,
                       delegate_adapter=not args.adapter_outside_xnnpack, role=role,
                       decode_window=args.decode_window)
    set_threads(args.threads)
    out = Path(args.out) if args.out else program_dir(name, args.quant, args.max_seq, args.specvocab_k, role,
                                                      args.head_tokens)
    lm = load_model(name, dtype="fp32").model
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    if role == "target":
        export_target(lm, out, cfg, log=log)
    else:
        ranker = load_ranker(args.ranker, lm.get_output_embeddings().weight) if args.ranker else None
        export_drafter(lm, out, cfg, log=log, ranker=ranker)
    print(out)
    return 0


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt


def _cmd_bench(args) -> int:
    import signal

    from omnidraft.bench.command import run_command

    # a suite's servers (vLLM, llama.cpp's, omnidraft serve) run in sessions of their own and stop in
    # its finally blocks: SIGTERM (kill, a CI timeout) unwinds through them as Ctrl-C does
    signal.signal(signal.SIGTERM, _interrupted)
    run_command(args, lambda s: print(f"[bench] {s}", file=sys.stderr, flush=True))
    return 0


def _cmd_cost(args) -> int:
    from omnidraft.device.threads import set_threads
    from omnidraft.device.cpu import cpu_info
    from omnidraft.measure.stamp import cpu_line
    from omnidraft.pairs.build import load_drafter, local_target
    from omnidraft.pairs.timing import measure, runtime_name

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
    out = {"target": args.target, "runtime": runtime_name(target, args.dtype), "drafter": args.drafter,
           "drafter_runtime": runtime_name(drafter, "fp32") if drafter else None,
           "cpu": cpu["model"], "cpu_flags": cpu["flags"], "native_bf16": cpu["native_bf16"],
           "threads": _threads(), "verify_ms": model.verify_ms, "drafter_ms": model.drafter_ms,
           "catchup_ms": model.catchup_ms, "read_ms_per_id": model.read_ms,
           "verify_ratio": {w: round(ms / model.verify_ms[widths[0]], 3) for w, ms in model.verify_ms.items()}}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"CPU: {cpu_line(cpu, out['threads'])}")
    print(f"target {args.target} on {out['runtime']}, {out['threads']} threads")
    print("  width  ms      x one token")
    for w, ms in model.verify_ms.items():
        print(f"  {w:>5}  {ms:>6.1f}  {out['verify_ratio'][w]:.2f}")
    print(f"  a prompt read: {model.read_ms:.2f} ms per id, {widths[-1]} at a time (the last row's logits only)")
    if drafter is not None:
        print(f"drafter {args.drafter} on {out['drafter_runtime']}: {model.drafter_ms:.1f} ms per token, "
              f"{model.catchup_ms:.2f} ms per token reading committed text (its catch-up)")
    return 0


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
    from omnidraft.jobs.demo import demo
    from omnidraft.device.threads import set_threads

    set_threads(args.threads)
    demo(prompts=args.prompts, max_new_tokens=args.max_new_tokens, calibration_s=args.calibration_seconds,
         llamacpp=not args.no_llamacpp)
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
    import os

    from omnidraft.jobs.first_start import prepare
    from omnidraft.pairs.settings import Runtime, TargetRef
    from omnidraft.sampling import SamplingConfig
    from omnidraft.serve.server import ServeConfig, model_id, serve
    from omnidraft.session import Session

    keys = args.api_key or [k.strip() for k in os.environ.get("OMNIDRAFT_API_KEY", "").split(",")]
    cfg = ServeConfig(host=args.host, port=args.port, api_keys=tuple(k for k in keys if k), slots=args.slots,
                      queue=args.queue, max_body=args.max_body, adapt=not (args.no_adapt or args.no_log),
                      sampling=SamplingConfig(temperature=args.temperature, top_p=args.top_p),
                      shared_memory=args.shared_memory)
    drafter = None if args.drafter == "none" else args.drafter
    runtime = Runtime(drafter=args.drafter_runtime, target=args.target_runtime, dtype=args.dtype, threads=args.threads,
                      memory_mib=args.memory_mib, max_memory_mib=_mib(args.max_memory), cache_ram_mib=args.cache_ram,
                      state_dir=args.state_dir, state_disk_mib=args.state_disk)
    return serve(cfg, model_id(args.target), lambda: Session(
        drafter, args.target, sampling=cfg.sampling, lookup=not args.no_lookup, memory=not args.no_memory,
        log=not args.no_log, adapter=args.adapter, runtime=runtime, exact=args.exact, slots=args.slots),
        prepare=lambda say: prepare(drafter, TargetRef(args.target), runtime, args.exact, say))


def _cmd_serve_target(args) -> int:
    import uvicorn

    from omnidraft.device.threads import set_threads
    from omnidraft.models.loading import load_model
    from omnidraft.remote.server import ServerLimits, create_app

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
    for name, path in catalog.fetch_all(args.names, keep_packages=args.keep_packages):
        print(f"{name}: {path}")
    return 0


def _target_ref(args):
    """The --target and the options that say how to reach it, as a TargetRef."""
    from omnidraft.pairs.settings import TargetRef

    remote = TargetRef(args.target).remote
    return TargetRef(args.target, token=read_token(args.token_file) if remote else None,
                     tokenizer=args.target_tokenizer, model=getattr(args, "target_model", None),
                     context=getattr(args, "target_context", 2048), engine=getattr(args, "target_engine", None),
                     fallback=getattr(args, "fallback_target", None))


def _runtime(args):
    from omnidraft.pairs.settings import Runtime

    return Runtime(drafter=args.drafter_runtime, target=args.target_runtime, quant=args.quant, max_seq=args.max_seq,
                   specvocab_k=args.specvocab_k, dtype=args.dtype, threads=args.threads,
                   ngram_policy=args.cache_policy, ngram_mib=args.cache_mib, memory_mib=args.memory_mib,
                   max_memory_mib=_mib(args.max_memory))


def _mib(size: str | None) -> int | None:
    """A --max-memory size in MiB (None: none given)."""
    from omnidraft.models.budget import parse_size

    return None if size is None else max(1, parse_size(size) >> 20)


def _cmd_generate(args) -> int:
    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.modes import check_verify_mode
    from omnidraft.decode.text import drained
    from omnidraft.jobs.first_start import prepare
    from omnidraft.pairs.spec import DEFAULT_DRAFTER
    from omnidraft.propose.config import SpecConfig
    from omnidraft.propose.registry import get
    from omnidraft.sampling import SamplingConfig
    from omnidraft.session import Session

    if not args.prompt.strip():
        raise OmniDraftError("empty prompt", "pass some text with --prompt")
    strategy = args.strategy or ("omnidraft" if args.drafter else "ar")
    drafter = args.drafter or (DEFAULT_DRAFTER if get(strategy).speculative else None)
    spec = SpecConfig(strategy, confidence=args.confidence or None)
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    target, runtime = _target_ref(args), _runtime(args)
    check_verify_mode(args.verify)
    if args.draft_length is not None:
        FixedK(args.draft_length)  # the options refused before a first run pairs
    prepare(drafter if args.draft_length != 0 else None, target, runtime, args.exact,
            lambda *a, **k: print(*a, file=sys.stderr, flush=True, **k))
    session = Session(drafter, target, k=args.draft_length, spec=spec, sampling=sampling,
                      verify=args.verify, lookup=not args.no_lookup, memory=not args.no_memory, log=not args.no_log,
                      adapter=args.adapter, runtime=runtime, exact=args.exact)
    on_text = None if args.json else (lambda s: print(s, end="", flush=True))
    try:
        result = drained(session.stream(args.prompt, max_new_tokens=args.max_new_tokens, chat=args.chat), on_text)
    finally:
        session.close()
    m = result.metrics
    if args.json:
        print(json.dumps({"text": result.text, "token_ids": result.token_ids, "lossless": result.lossless,
                          "exactness": m.get("exactness"), "verify": m.get("verify"), "adapter": m.get("adapter"),
                          "engine": m.get("engine"),
                          "logged": session.log is not None and not session.alone, "metrics": m}))
    else:
        print("\n\n" + format_metrics(m, paired=not session.alone), file=sys.stderr)
    return 0


def format_metrics(m: dict, paired: bool = True) -> str:
    """The figures of one generation; ``paired``: a drafter ran (its adapter is named)."""
    line = (f"[{m['strategy']}] {m['new_tokens']} tokens in {m['wall_s']:.2f} s: "
            f"{m['tokens_per_s']:.2f} tokens/s (decode {m['decode_tokens_per_s']:.2f} tokens/s)")
    if m.get("engine"):
        line += f"\n  the serving engine's own output ({m['engine']['url']}), measured faster than the pair"
    elif paired:
        line += f"\n  adapter: {m.get('adapter') or 'none (the drafter unadapted)'}"
    if m.get("target_runtime") == "llamacpp" and paired:
        line += ("\n  target on llama.cpp: exact with respect to the logits of its verify calls, which are not "
                 "batch-invariant (--exact keeps to the ExecuTorch program)")
    elif m.get("target_runtime") == "llamacpp":
        line += "\n  target on llama.cpp, one token a call: its own output"
    elif m.get("target_runtime") == "eager" and m.get("exactness") == "logits":
        line += ("\n  target on eager PyTorch: exact with respect to the logits its calls compute, which are not "
                 "batch-invariant (`omnidraft pair` builds the bit-exact ExecuTorch program)")
    cm = m.get("cost_model")
    if cm:
        line += (f"\n  cost model: drafting k = {cm['k']} per round, predicted {cm['predicted_tokens_per_s']:.2f} "
                 f"tokens/s decoding" if cm["k"] else
                 f"\n  cost model: the target alone ({cm['target_alone_tokens_per_s']:.2f} tokens/s predicted); "
                 f"drafting k = {cm['best_k']} would give {cm['best_k_tokens_per_s']:.2f}")
    if m.get("verify"):
        line += f"\n  verify {m['verify']}: " + ("lossless" if m.get("lossless", True) else
                                                 "APPROXIMATE (not exactly the target's distribution)")
    if m["proposed"]:
        line += (f"\n  acceptance {m['acceptance_rate']:.3f}, {m['mean_accepted_per_step']:.2f} accepted"
                 f" + 1 per step over {m['steps']} steps, n-gram hits/step "
                 f"{m['ngram_hits_per_step']:.2f}, target forwards {m['target_forwards']}, drafter "
                 f"forwards {m['drafter_forwards']}, translation {m['translate_ms_median']:.3f} ms/step"
                 f" median")
    kinds = m.get("rounds_by_kind", {})
    if kinds.get("lookup") or kinds.get("memory"):
        line += "\n  rounds: " + ", ".join(f"{kind} {c['rounds']} ({c['accepted']}/{c['proposed']} accepted)"
                                           for kind, c in sorted(kinds.items()))
    return line


def main(argv: list[str] | None = None) -> int:
    from omnidraft.device.threads import configure_process
    from omnidraft.quiet import quiet_libraries

    args = build_parser().parse_args(argv)
    if args.command != "serve-target":  # the server verifies on an eager model in worker threads
        configure_process()  # before torch loads: MKL must not start thread teams inside ExecuTorch's
    quiet_libraries()
    try:
        if args.command == "models":
            return _cmd_models(args)
        if args.command == "generate":
            return _cmd_generate(args)
        if args.command == "serve-target":
            return _cmd_serve_target(args)
        handler = {"serve": _cmd_serve, "pair": _cmd_pair, "pairs": _cmd_pairs, "memory": _cmd_memory,
                   "daemon": _cmd_daemon, "demo": _cmd_demo,
                   "export": _cmd_export, "export-adapter": _cmd_export_adapter, "cost": _cmd_cost,
                   "distill": _cmd_distill, "bench": _cmd_bench}
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
