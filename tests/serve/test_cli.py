"""`omnidraft serve` as a user runs it: its own process, killed with SIGKILL in the middle of a
stream, then started again: the verification log loses nothing it had committed and passes
SQLite's integrity check, and the restarted server's answer is the target's own again. Also the
command's one-line refusals."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from omnidraft.decode.target import LocalTarget

from .conftest import KEY, free_port
from .test_server import own_greedy


def _start(models, port: int, env: dict) -> subprocess.Popen:
    drafter, target = models
    return subprocess.Popen([sys.executable, "-m", "omnidraft.cli", "serve", "--drafter", drafter, "--target", target,
                             "--dtype", "fp32", "--port", str(port), "--no-adapt", "--threads", "1"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_ready(url: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    pytest.fail("the server did not become ready")


def _post(url: str, body: dict, stream: bool = False):
    req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"})
    resp = urllib.request.urlopen(req, timeout=120)
    return resp if stream else json.loads(resp.read())


def test_kill9_mid_stream_loses_no_logged_verification_and_a_restart_serves_exactly(models, home, qwen_tok):
    from omnidraft.models.loading import load_model
    from omnidraft.pairs.spec import log_path

    env = {**os.environ, "OMNIDRAFT_HOME": str(home), "OMNIDRAFT_API_KEY": KEY}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    name = os.path.basename(models[1])
    ref = own_greedy(LocalTarget(load_model(models[1], dtype="fp32")), qwen_tok, prompt="def add(a, b):", n=16)
    proc = _start(models, port, env)
    try:
        _wait_ready(url, proc)
        for _ in range(2):
            assert _post(url, {"model": name, "prompt": "def add(a, b):", "max_tokens": 16})["choices"][0]["text"] == ref
        stream = _post(url, {"model": name, "prompt": "Once upon", "max_tokens": 900, "stream": True}, stream=True)
        assert stream.readline().startswith(b"data: ")
        os.kill(proc.pid, signal.SIGKILL)  # mid-stream
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    db = sqlite3.connect(log_path())
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    logged = db.execute("SELECT count(*) FROM records").fetchone()[0]
    db.close()
    assert logged >= 2  # both finished requests' verifications
    proc = _start(models, port, env)
    try:
        _wait_ready(url, proc)
        assert _post(url, {"model": name, "prompt": "def add(a, b):", "max_tokens": 16})["choices"][0]["text"] == ref
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: a clean stop, exit 130 as every command's
        assert proc.wait(60) == 130 and "Traceback" not in proc.stderr.read().decode()
    db = sqlite3.connect(log_path())
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT count(*) FROM records").fetchone()[0] == logged + 1
    db.close()


def test_the_command_refuses_an_open_host_without_a_key_in_one_line(home):
    env = {k: v for k, v in os.environ.items() if k != "OMNIDRAFT_API_KEY"}
    out = subprocess.run([sys.executable, "-m", "omnidraft.cli", "serve", "--host", "0.0.0.0"],
                         env={**env, "OMNIDRAFT_HOME": str(home)}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "needs an API key" in out.stderr


@pytest.mark.parametrize("fields,says", [
    ({"host": "192.168.1.5"}, "needs an API key"),
    ({"host": "::1"}, None),  # loopback: no key needed
    ({"api_keys": ("long enough key", "short")}, "at least 8 characters"),
    ({"slots": 0}, "--slots must be >= 1"),
    ({"port": 70000}, "--port must be in 0..65535"),
    ({"queue": -1}, "--queue must be >= 0"),
])
def test_serve_settings_check_themselves(fields, says):
    from omnidraft.errors import OmniDraftError
    from omnidraft.serve.server import ServeConfig

    if says is None:
        ServeConfig(**fields)
        return
    with pytest.raises(OmniDraftError, match=re.escape(says)):
        ServeConfig(**fields)
