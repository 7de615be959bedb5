"""The daemon as a guest on the device. Idle, it costs nothing: with a pair whose log has fewer new
records than a round needs, it polls with a count query and never loads a model (on a phone-like
device it would otherwise burn a core around the clock). With work, it trains only while nothing
generates, stops within a moment of SIGTERM mid-round losing no record, and one a server started
ends with that server even when the server is killed."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from omnidraft.generating import generating
from omnidraft.pairs.spec import PairSpec, adapter_store, log_path, save_spec
from omnidraft.train.tuning import cursor, history
from omnidraft.train.verlog import VerificationLog

from ..test_session import FP32, PROMPTS, models  # noqa: F401  (the tiny pair the Session tests run)

IDLE_S = 20.0  # 4 polls at half the default interval; the budget, 1% of it, is 20 clock ticks of CPU time (on
# this CI's VM a Python process pays ~10-20 ms of CPU per wakeup; the poll before this one, a count query and
# ten wakeups a second, cost ~90 ms a second)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its waited-for children (/proc/PID/stat)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def test_an_idle_daemon_uses_under_one_percent_of_a_core(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("OMNIDRAFT_HOME", str(home))
    spec = PairSpec("smollm2-135m", "qwen2.5-coder-0.5b")
    save_spec(spec)
    log = VerificationLog(log_path())
    for i in range(5):  # some records, fewer than a round's 32: never read while idle
        log.append(spec.name, f"prompt {i}", b"not a record")
    log.close()
    proc = subprocess.Popen([sys.executable, "-m", "omnidraft.cli", "daemon", "run", "--poll", "5"],
                            env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    status = home / "daemon" / "status.json"
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (status.is_file() and json.loads(status.read_text())["state"] == "idle"):
            time.sleep(0.2)
        time.sleep(5.5)  # past its first poll
        before = _cpu_s(proc.pid)
        time.sleep(IDLE_S)
        used = _cpu_s(proc.pid) - before
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert used < 0.01 * IDLE_S, f"{used:.2f} CPU seconds in {IDLE_S:.0f} s idle"
        assert json.loads(status.read_text())["state"] == "idle"  # it never started a round
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _status(home) -> dict:
    try:
        return json.loads((home / "daemon" / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _until(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s:.0f} s: {what}")


def _gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped counts as exited)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture()
def due_pair(tmp_path, monkeypatch, models):
    """A home whose tiny pair has a round's worth of logged verifications, and a round config
    that trains on them."""
    from omnidraft import Session

    home = tmp_path / "home"
    monkeypatch.setenv("OMNIDRAFT_HOME", str(home))
    s = Session(*models, runtime=FP32, memory=False)
    for p in PROMPTS + PROMPTS[:2]:  # 12 records, every 5th held out: one update's 8 to train on
        s.generate(p, max_new_tokens=16)
    s.close()
    config = tmp_path / "round.json"
    config.write_text(json.dumps({"min_records": 4, "max_records": 8, "eval_records": 2, "replay": 0}))
    return home, config, s.spec


def test_the_daemon_trains_only_while_nothing_generates_and_stops_at_once_mid_round(due_pair):
    home, config, spec = due_pair
    run = [sys.executable, "-m", "omnidraft.cli", "daemon", "run", "--poll", "0.2", "--config", str(config)]
    with generating():  # a generation in flight from before the daemon starts
        proc = subprocess.Popen([*run, "--throttle", "0.5"], env=dict(os.environ), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            _until(lambda: _status(home).get("state") == "yielding", 120, "the daemon yielding to the generation")
            time.sleep(3.0)
            assert _status(home)["state"] == "yielding"  # it never began the round it is due
        except BaseException:
            proc.kill()
            raise
    try:
        _until(lambda: "trained on" in _status(home).get("progress", ""), 120, "a round under way once idle")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        took = time.monotonic() - t0
    finally:
        proc.kill()
    assert took < 2.0, f"SIGTERM mid-round took {took:.1f} s"
    assert _status(home)["state"] == "stopped"
    store = adapter_store()
    assert store.latest(spec.name) is None and cursor(spec, store) == 0 and history(spec) == []  # nothing half-written
    done = subprocess.run([*run, "--once"], env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rounds = history(spec)
    assert len(rounds) == 1 and rounds[0]["status"] in ("published", "rejected")
    assert cursor(spec, store) == rounds[0]["records_through"] > 0  # the interrupted round's records, trained


def test_a_daemon_its_server_started_ends_with_the_server_even_killed(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("OMNIDRAFT_HOME", str(home))
    server = subprocess.Popen([sys.executable, "-c", "import os, time\nfrom omnidraft.train import daemon\n"
                               "print(daemon.start(poll_s=0.2, parent=os.getpid()), flush=True)\ntime.sleep(600)"],
                              env=dict(os.environ), stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(server.stdout.readline())
        _until(lambda: _status(home).get("pid") == pid and _status(home)["state"] == "idle", 120, "the daemon up")
        from omnidraft.train import daemon

        said = daemon.status()  # what `omnidraft daemon status` prints: its RSS read from /proc
        assert said["running"] and said["pid"] == pid and 10 < said["rss_mib"] < 2048
        server.kill()
        server.wait(timeout=10)
        t0 = time.monotonic()
        _until(lambda: _gone(pid), 10, "the daemon ending with its server")
        assert time.monotonic() - t0 < 2.0
    finally:
        server.kill()
        if pid is not None and not _gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_server_stopped_by_sigterm_stops_the_daemon_it_started(tmp_path, monkeypatch):
    """`omnidraft serve`'s own shutdown: uvicorn handles the SIGTERM and raises it again once shut
    down; the server must still stop its daemon on the way out, not leave it training parentless."""
    home = tmp_path / "home"
    monkeypatch.setenv("OMNIDRAFT_HOME", str(home))
    script = ("import sys\nfrom types import SimpleNamespace\nfrom omnidraft.serve.server import ServeConfig, serve\n"
              "session = SimpleNamespace(log=object(), slots=1, close=lambda: None,\n"
              "                          conversations=SimpleNamespace(states=None))\n"
              "sys.exit(serve(ServeConfig(port=0), 'stub', lambda: session))")
    server = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ), stderr=subprocess.PIPE, text=True)
    pid = None
    try:
        _until(lambda: "serving stub" in server.stderr.readline(), 120, "the server ready")
        pid = _until(lambda: _status(home).get("pid") if _status(home).get("state") == "idle" else None, 120,
                     "the daemon up")
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=10) == 128 + signal.SIGTERM
        assert _gone(pid)  # stopped by the server before it exited
    finally:
        server.kill()
        if pid is not None and not _gone(pid):
            os.kill(pid, signal.SIGKILL)
