"""An idle daemon costs nothing: with a pair whose log has fewer new records than a round needs,
it polls with a count query and never loads a model (on a phone-like device it would otherwise
burn a core around the clock)."""

import json
import os
import subprocess
import sys
import time

from omnidraft.pairs.spec import PairSpec, log_path, save_spec
from omnidraft.train.verlog import VerificationLog

IDLE_S = 10.0  # 20 polls; the budget, 1% of it, is 10 clock ticks of CPU time


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
    proc = subprocess.Popen([sys.executable, "-m", "omnidraft.cli", "daemon", "run", "--poll", "0.5"],
                            env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    status = home / "daemon" / "status.json"
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (status.is_file() and json.loads(status.read_text())["state"] == "idle"):
            time.sleep(0.2)
        time.sleep(1.0)  # past its first poll
        before = _cpu_s(proc.pid)
        time.sleep(IDLE_S)
        used = _cpu_s(proc.pid) - before
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert used < 0.01 * IDLE_S, f"{used:.2f} CPU seconds in {IDLE_S:.0f} s idle"
        assert json.loads(status.read_text())["state"] == "idle"  # it never started a round
    finally:
        proc.terminate()
        proc.wait(timeout=60)
