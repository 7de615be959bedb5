"""`omnidraft serve`: the pair behind an OpenAI-compatible HTTP server, and the fine-tuning daemon
beside it.

The port opens at once (``/health`` says 503 while the Session loads: a first start's pairing,
programs, adapter, cost model, one cache per slot; its ``stage`` says which); a Session that
cannot load ends the server with its one-line error.
Unless ``adapt`` is off, the daemon (train/daemon.py: its own low-priority process, training only
once enough new verifications are logged, and only while no generation runs) runs beside it and
ends with the server, even a killed one (a daemon the user started stays theirs); the adapter it
publishes goes live between generations. Knows uvicorn and processes; the routes are app.py's.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from omnidraft.errors import OmniDraftError
from omnidraft.sampling import SamplingConfig

LOOPBACK = ("localhost",)
MIN_KEY = 8


def _note(message: str) -> None:
    print(f"omnidraft: {message}", file=sys.stderr, flush=True)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def model_id(target: str) -> str:
    """The id /v1/models lists: a catalog name as it is, a GGUF's file stem, a folder's name."""
    path = Path(target)
    if target.endswith(".gguf"):
        return path.stem
    return path.name if ("/" in target or path.is_dir()) else target


@dataclass(frozen=True)
class ServeConfig:
    """Where the server listens and what it allows. A non-loopback ``host`` needs an API key;
    ``api_keys``: each key's generations have a memory of their own, unless ``shared_memory``.
    ``slots``: loaded caches kept between requests, one per conversation (least recently used
    evicted): only for runtimes that cannot save a conversation's state (Session ``runtime``);
    ``queue``: requests that may wait behind the one generating (more: 429); ``max_body``: bytes;
    ``sampling``: what a request that names none gets (greedy: the target's own output)."""

    host: str = "127.0.0.1"
    port: int = 8080
    api_keys: tuple[str, ...] = ()
    slots: int = 1
    queue: int = 8
    max_body: int = 1 << 20
    adapt: bool = True
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    shared_memory: bool = False

    def __post_init__(self):
        if not 0 <= self.port <= 65535:
            raise OmniDraftError(f"--port must be in 0..65535, got {self.port}")
        if self.slots < 1:
            raise OmniDraftError(f"--slots must be >= 1, got {self.slots}")
        if self.queue < 0:
            raise OmniDraftError(f"--queue must be >= 0, got {self.queue}")
        if self.max_body < 1024:
            raise OmniDraftError(f"--max-body must be >= 1024 bytes, got {self.max_body}")
        if any(len(key) < MIN_KEY for key in self.api_keys):
            raise OmniDraftError(f"an API key must be at least {MIN_KEY} characters")
        if not self.api_keys and not is_loopback(self.host):
            raise OmniDraftError(f"--host {self.host} is reachable beyond this machine: it needs an API key",
                                 "pass --api-key or set OMNIDRAFT_API_KEY")


def _exit_on_term(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _kept(session) -> str:
    """How ``session`` keeps conversations between requests, in words."""
    states = session.conversations.states
    if states is None:
        return f"{session.slots} conversation slot{'s' if session.slots > 1 else ''}"
    disk = f", {states.disk_bytes >> 20} MiB in {states.folder}" if states.folder is not None else ""
    return f"conversations' states saved: {states.ram_bytes >> 20} MiB in RAM{disk}"


def serve(cfg: ServeConfig, model: str, make_session, prepare=None) -> int:
    """Serve until interrupted: ``make_session()`` builds the Session (in the background), its
    model listed as ``model``, after ``prepare(say)`` (a first start's pairing, jobs/first_start.py:
    each line it says is logged and is /health's ``stage`` meanwhile). Returns 0; a Session that
    cannot load is its OmniDraftError."""
    import uvicorn

    from omnidraft.serve.app import Served, create_app
    from omnidraft.serve.runner import Runner
    from omnidraft.train import daemon

    runner = Runner(make_session, cfg.queue, prepare, _note)
    app = create_app(runner, Served(model, cfg.api_keys, cfg.max_body, cfg.sampling, cfg.shared_memory))
    server = uvicorn.Server(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="warning",
                                           timeout_graceful_shutdown=5))
    started = []  # the daemon's pid, when this server started it

    def ready() -> None:
        if runner.failed:
            server.should_exit = True
            return
        if cfg.adapt and runner.session.log is not None and not daemon.read_pid():
            started.append(daemon.start(parent=os.getpid()))
        _note(f"serving {model} on http://{cfg.host}:{cfg.port}/v1 ({_kept(runner.session)}"
              f"{', the daemon adapting the drafter beside it' if cfg.adapt else ''}); chat at "
              f"http://{cfg.host}:{cfg.port}/")

    runner.on_ready = ready
    _note(f"loading {model} (GET /health answers 503 until ready)")
    # uvicorn shuts down on SIGTERM, then raises it again under the handler it found: by default
    # that ended the process before the daemon was stopped (it trained on, 11-14 s, parentless)
    terminated = signal.signal(signal.SIGTERM, _exit_on_term) if _main_thread() else None
    try:
        server.run()
    finally:
        if started:
            daemon.stop()
        if runner.session is not None:
            runner.session.close()
        if terminated is not None:
            signal.signal(signal.SIGTERM, terminated)
    if runner.failed:
        raise OmniDraftError(runner.failed)
    return 0
