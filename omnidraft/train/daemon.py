"""The background fine-tuning daemon: a low-priority process that runs tuning rounds for every
pair whose verification log has enough new records. While none has, it costs nothing: each poll
is a count query per pair, and a model is loaded only for a round that will run. No network
port: it is controlled through files in $OMNIDRAFT_HOME/daemon/ (pid, status.json, a pause flag)
and signals (SIGTERM stops after the current record). Knows processes and files; training is
tuning.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from omnidraft.fsio import atomic_write_json
from omnidraft.home import subdir


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


def serve(poll_s: float = 10.0, once: bool = False, cfg=None, nice: int = 10, throttle_s: float = 0.0) -> int:
    """The daemon's loop (runs in the foreground; ``start`` runs it detached). ``throttle_s``:
    a pause after every trained record, to cap the CPU share on a busy device."""
    from omnidraft.models.loading import load_model
    from omnidraft.pairs.spec import adapter_store, list_specs, log_path
    from omnidraft.train.tuning import RoundConfig, due, run_round
    from omnidraft.train.verlog import VerificationLog

    cfg = cfg or RoundConfig()
    if nice:
        os.nice(nice)
    stop = {"flag": False}

    def on_term(_sig, _frame):
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_term)
    pause_flag = _dir() / "pause"

    def wait_if_paused():
        if throttle_s:
            time.sleep(throttle_s)
        if stop["flag"]:
            raise _Stop
        while pause_flag.exists():
            _write_status(state="paused")
            time.sleep(0.5)
            if stop["flag"]:
                raise _Stop

    log, store = VerificationLog(log_path()), adapter_store()
    _write_status(state="idle")
    try:
        while not stop["flag"]:
            ran = False
            for spec in list_specs():
                wait_if_paused()
                if not due(spec, log, store, cfg):
                    continue
                _write_status(state="training", pair=spec.name)
                result = run_round(spec, log, store, load_model(spec.drafter, dtype="fp32").model, cfg,
                                   wait_if_paused=wait_if_paused,
                                   progress=lambda m: _write_status(state="training", pair=spec.name, progress=m))
                ran = True
                _write_status(state="idle", pair=spec.name, last=result)
                ptds = f" {result['version']} (.ptd for {result['ptds']} program(s))" if "ptds" in result else ""
                print(f"[daemon] {spec.name}: {result['status']}{ptds}", flush=True)
            if once and not ran:
                break
            if not ran:
                for _ in range(int(poll_s * 10)):
                    if stop["flag"]:
                        break
                    time.sleep(0.1)
    except _Stop:
        pass
    finally:
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


def start(poll_s: float = 10.0, throttle_s: float = 0.0, config: str | Path | None = None) -> int:
    """Launch the daemon detached at low priority; returns its pid (an existing one if running).
    ``config``: a JSON file of RoundConfig fields (checked here, before launching)."""
    pid = read_pid()
    if pid:
        return pid
    load_config(config)
    out = open(_dir() / "daemon.log", "ab")
    extra = ["--config", str(Path(config).resolve())] if config else []
    proc = subprocess.Popen([sys.executable, "-m", "omnidraft.cli", "daemon", "run", "--poll", str(poll_s),
                             "--throttle", str(throttle_s), *extra],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=os.environ.copy())
    (_dir() / "pid").write_text(str(proc.pid))
    return proc.pid


def stop(timeout_s: float = 60.0) -> bool:
    """SIGTERM (finishes the current record), then SIGKILL after ``timeout_s``. True if it ran."""
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


def status() -> dict:
    path = _dir() / "status.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        info = {}
    pid = read_pid()
    return {**info, "running": bool(pid), "pid": pid, "paused": (_dir() / "pause").exists()}


def pause(on: bool = True) -> None:
    flag = _dir() / "pause"
    if on:
        flag.touch()
    else:
        flag.unlink(missing_ok=True)
