"""The background fine-tuning daemon: a low-priority process that runs tuning rounds for every
pair whose verification log has enough new records. While none has, it costs nothing: each poll
is a count query per pair, and a model is loaded only for a round that will run. No network
port: it is controlled through files in $OMNIDRAFT_HOME/daemon/ (pid, status.json, a pause flag)
and signals. A guest on the device: it trains only while nothing generates (generating.py) and
yields within one record when a generation starts; SIGTERM ends it at once at any point of a
round (the round's records stay in the log for the next one), and one a server started ends with
that server. Knows processes and files; training is tuning.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from omnidraft.fsio import atomic_write_json
from omnidraft.generating import idle
from omnidraft.home import subdir
from omnidraft.models.budget import release, status as process_status

RECHECK_S = 300.0


def _dir() -> Path:
    return subdir("daemon")


def _write_status(**fields) -> None:
    atomic_write_json(_dir() / "status.json", {"pid": os.getpid(), "time": time.time(), **fields})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie child of ours counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def read_pid() -> int | None:
    path = _dir() / "pid"
    try:
        pid = int(path.read_text())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


class _Stop(Exception):
    pass


class _Guest:
    """How the daemon keeps out of the way, checked before every trained record: it stops at
    SIGTERM at once (between two records or inside one; not while a round publishes, which it
    finishes first), stops when ``parent`` (the server that started it) is gone, and waits while
    paused or while anything generates (generating.py)."""

    def __init__(self, parent: int | None, throttle_s: float):
        self.parent, self.throttle_s = parent, throttle_s
        self.stopping = self.committing = False
        signal.signal(signal.SIGTERM, self._on_term)
        self.pause_flag = _dir() / "pause"

    def _on_term(self, _sig, _frame) -> None:
        self.stopping = True
        if not self.committing:
            raise _Stop

    def _check_stop(self) -> None:
        if self.stopping or (self.parent is not None and not _alive(self.parent)):
            raise _Stop

    def wait(self) -> None:
        """Return when the daemon may train on; raise _Stop when it must end."""
        if self.throttle_s:
            time.sleep(self.throttle_s)
        said, before = None, None
        while True:
            self._check_stop()
            state = "paused" if self.pause_flag.exists() else None if idle() else "yielding"
            if state is None:
                if before is not None:  # what it was doing, said again
                    _write_status(**{k: v for k, v in before.items() if k not in ("pid", "time")})
                return
            if state != said:
                if before is None:
                    before = _read_status()
                _write_status(state=state)
                said = state
            time.sleep(0.1)

    def sleep(self, seconds: float) -> None:
        """Idle between polls with as few wakeups as it can (each one costs a phone's CPU a
        scheduler tick): SIGTERM interrupts the sleep itself; a parent is looked at once a second."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self._check_stop()
            time.sleep(min(left, 1.0) if self.parent is not None else left)
        self._check_stop()

    @contextmanager
    def publishing(self) -> Iterator[None]:
        """A round's commit (the version, the cursor, the .ptds) runs to its end; a SIGTERM meanwhile
        stops the daemon after it."""
        self.committing = True
        try:
            yield
        finally:
            self.committing = False
        self._check_stop()


def serve(poll_s: float = 10.0, once: bool = False, cfg=None, nice: int = 10, throttle_s: float = 0.0,
          parent: int | None = None) -> int:
    """The daemon's loop (runs in the foreground; ``start`` runs it detached). ``throttle_s``:
    a pause after every trained record, to cap the CPU share on a busy device. ``parent``: a
    process whose end ends the daemon too (the server that started it)."""
    from omnidraft.models.loading import load_model
    from omnidraft.pairs.spec import adapter_store, list_specs, log_path
    from omnidraft.train.tuning import RoundConfig, due, run_round
    from omnidraft.train.verlog import VerificationLog

    cfg = cfg or RoundConfig()
    if nice:
        os.nice(nice)
    guest = _Guest(parent, throttle_s)
    log, store = VerificationLog(log_path()), adapter_store()
    pairs, settled, settled_at = subdir("pairs"), None, 0.0
    _write_status(state="idle")
    try:
        while True:
            ran = False
            # nothing appended and no pair added since a poll that found nothing due: nothing is due
            # now either (looked at anyway every RECHECK_S); a phone's idle poll is three stats
            stamp = (log.stamp(), pairs.stat().st_mtime_ns)
            looked = stamp != settled or time.monotonic() - settled_at > RECHECK_S
            specs = list_specs() if looked else []
            for spec in specs:
                if not due(spec, log, store, cfg):
                    continue
                guest.wait()
                _write_status(state="training", pair=spec.name)
                result = run_round(spec, log, store, load_model(spec.drafter, dtype="fp32").model, cfg,
                                   wait_if_paused=guest.wait, publishing=guest.publishing,
                                   progress=lambda m: _write_status(state="training", pair=spec.name, progress=m))
                release()  # the round's training copy of the drafter goes with it, back to the system
                ran = True
                _write_status(state="idle", pair=spec.name, last=result)
                ptds = f" {result['version']} (.ptd for {result['ptds']} program(s))" if "ptds" in result else ""
                print(f"[daemon] {spec.name}: {result['status']}{ptds}", flush=True)
            if once and not ran:
                break
            if not ran:
                if looked:
                    settled, settled_at = stamp, time.monotonic()
                guest.sleep(poll_s)
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _write_status(state="stopped")
        log.close()
    return 0


def load_config(path: str | Path | None):
    """The RoundConfig of a JSON file (fields of RoundConfig, ``train`` / ``head`` nested), or
    the defaults; a bad file is one clear error."""
    from omnidraft.errors import OmniDraftError
    from omnidraft.train.tuning import RoundConfig

    if path is None:
        return RoundConfig()
    try:
        fields = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise OmniDraftError(f"cannot read the daemon config {path}: {err}") from None
    if not isinstance(fields, dict):
        raise OmniDraftError(f"the daemon config {path} must hold a JSON object")
    try:
        return RoundConfig.from_dict(fields)
    except TypeError as err:
        raise OmniDraftError(f"bad daemon config {path}: {err}") from None


def start(poll_s: float = 10.0, throttle_s: float = 0.0, config: str | Path | None = None,
          parent: int | None = None) -> int:
    """Launch the daemon detached at low priority; returns its pid (an existing one if running).
    ``config``: a JSON file of RoundConfig fields (checked here, before launching); ``parent``: a
    process it ends with (a server's own pid; None: it runs until stopped)."""
    pid = read_pid()
    if pid:
        return pid
    load_config(config)
    out = open(_dir() / "daemon.log", "ab")
    extra = (["--config", str(Path(config).resolve())] if config else []) + (
        ["--parent", str(parent)] if parent is not None else [])
    proc = subprocess.Popen([sys.executable, "-m", "omnidraft.cli", "daemon", "run", "--poll", str(poll_s),
                             "--throttle", str(throttle_s), *extra],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=os.environ.copy())
    (_dir() / "pid").write_text(str(proc.pid))
    return proc.pid


def stop(timeout_s: float = 10.0) -> bool:
    """SIGTERM (it ends at once, or after a publish in progress), then SIGKILL after ``timeout_s``.
    True if it ran."""
    pid = read_pid()
    if not pid:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + timeout_s
    while time.time() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    (_dir() / "pid").unlink(missing_ok=True)
    return True


def _read_status() -> dict:
    try:
        info = json.loads((_dir() / "status.json").read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def started(pid: int) -> bool:
    """Whether the daemon ``pid`` is past its start-up (its imports): its first status written."""
    return _read_status().get("pid") == pid


def status() -> dict:
    info = _read_status()
    pid = read_pid()
    return {**info, "running": bool(pid), "pid": pid, "paused": (_dir() / "pause").exists(),
            **({"rss_mib": _rss_mib(pid)} if pid else {})}


def _rss_mib(pid: int) -> float | None:
    """The process's resident memory now (/proc), None where it cannot be read."""
    rss = process_status(pid).get("VmRSS")
    return None if rss is None else round(rss / 2**20, 1)


def pause(on: bool = True) -> None:
    flag = _dir() / "pause"
    if on:
        flag.touch()
    else:
        flag.unlink(missing_ok=True)
