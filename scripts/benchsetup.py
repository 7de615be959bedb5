"""Shared by the benchmark scripts: how a benchmark starts.

Knows the command-line options every script has (drafter and target names, dtype, threads,
draft length, new tokens, prompt count, output folder), the torch thread and seed setup, the
mixed HumanEval + chat prompt lists and the stderr progress log.
Does not know what a benchmark measures, its own options, or how its results are written
(benchio.py).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable


def parser(doc: str, *, target: str | None = "qwen2.5-coder-0.5b", dtype: str = "--target-dtype",
           dtype_help: str | None = None, max_new_tokens: int = 48, k: bool = True, k_help: str | None = None,
           prompts: int | None = None, prompts_help: str | None = None) -> argparse.ArgumentParser:
    """The parser of a benchmark described by ``doc``, with the shared options; the script adds
    its own. ``target``: the --target default (None: no --target); ``dtype``: the dtype option's
    name (--target-dtype or --dtype); ``k``: whether there is a --k (default 4); ``prompts``: the
    --prompts default (None: no --prompts)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", default="smollm2-135m")
    if target is not None:
        ap.add_argument("--target", default=target)
    ap.add_argument(dtype, default="bf16", choices=["fp32", "bf16"], help=dtype_help)
    ap.add_argument("--threads", type=int, default=2)
    if prompts is not None:
        ap.add_argument("--prompts", type=int, default=prompts, help=prompts_help)
    ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    if k:
        ap.add_argument("--k", type=int, default=4, help=k_help)
    ap.add_argument("--out", default="bench/results")
    return ap


def start(threads: int, seed: int | None = None) -> None:
    """Set torch's thread count and, when given, its global seed; keep the libraries' notes to
    their own developers out of the output (omnidraft/quiet.py)."""
    import torch

    from omnidraft.device.threads import set_threads
    from omnidraft.quiet import quiet_libraries

    quiet_libraries()
    set_threads(threads)
    if seed is not None:
        torch.manual_seed(seed)


def logger(tag: str | None = None) -> Callable[[str], None]:
    """A progress log to stderr, each line prefixed with ``[tag]`` when given."""
    prefix = f"[{tag}] " if tag else ""

    def log(msg: str) -> None:
        print(f"{prefix}{msg}", file=sys.stderr, flush=True)

    return log


def prompt_mix(code: int, chat: int, *, code_start: int = 0, chat_start: int = 0) -> list[tuple[str, bool]]:
    """``code`` HumanEval prompts from ``code_start``, then ``chat`` chat prompts from
    ``chat_start``, each with whether it goes through the chat template."""
    from omnidraft.prompts import CHAT_PROMPTS, humaneval

    return [(p, False) for p in humaneval(limit=code, start=code_start)] + \
        [(p, True) for p in CHAT_PROMPTS[chat_start: chat_start + chat]]
