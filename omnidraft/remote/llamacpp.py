"""Starting llama-cpp-python's OpenAI-compatible server (the ``llamacpp`` extra) on loopback, for
the benchmarks and the integration tier: a GGUF, a bearer key, a thread count, and whether it keeps
every position's logits (``logits_all``: what echoed prompt log-probabilities, hence an openai+
target, need; without it the server computes the last position only, as a plain deployment
would). Knows the server's command line; nothing about verification.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from omnidraft.errors import OmniDraftError


@contextmanager
def llamacpp_server(gguf: Path, key: str, *, threads: int = 2, logits_all: bool = True,
                    n_ctx: int = 2048, start_s: float = 120.0) -> Iterator[str]:
    """Yields the server's base URL (``http://127.0.0.1:PORT/v1``) once it answers; stops it after.
    A server that ended by itself (a crash: SIGILL from a llama.cpp built for another CPU) is an
    error on leaving, naming how it ended and the end of what it printed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--n_threads",
                             str(threads), "--n_ctx", str(n_ctx), "--logits_all", str(logits_all).lower(),
                             "--host", "127.0.0.1", "--port", str(port), "--api_key", key,
                             "--interrupt_requests", "false"],  # queue concurrent requests, not cut them
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + start_s
        while True:
            try:
                urllib.request.urlopen(urllib.request.Request(url + "/models",
                                                              headers={"Authorization": f"Bearer {key}"}))
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise OmniDraftError(f"llama-cpp-python's server did not start ({_ended(proc, log)})",
                                         "install the extra: pip install -e '.[llamacpp]' (README)") from None
                time.sleep(0.2)
        yield url
        if proc.poll() is not None:
            raise OmniDraftError(f"llama-cpp-python's server stopped while in use ({_ended(proc, log)})",
                                 "SIGILL: rebuild the extra on this CPU (README: pip cache remove first)")
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _ended(proc: subprocess.Popen, log) -> str:
    """How the server ended (exit code or signal name) and the last line it printed."""
    rc = proc.poll()
    how = "still running" if rc is None else (f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}")
    log.seek(0)
    lines = log.read().decode(errors="replace").strip().splitlines()
    return how + (f"; it printed: {lines[-1][-300:]}" if lines else "")
