"""`omnidraft bench usage` (omnidraft/bench/usage.py) on the tiny pair: a logged stream through
Session with the real daemon training beside it in its own process, held-out measurements of the
pair and the target alone interleaved, a result whose rows the history compares, in a scratch
home that leaves the real one's environment as it was."""

import json
import os

import pytest

from omnidraft.bench.usage import UsageOptions, run_usage, side_by_side
from omnidraft.cli import main
from omnidraft.errors import OmniDraftError
from omnidraft.prompts import CHAT_PROMPTS

from ..test_session import models  # noqa: F401  (the tiny pair the Session tests run, as model folders)


def test_usage_runs_a_logged_stream_with_the_daemon_and_measures_held_out_prompts(tmp_path, monkeypatch, models):
    home = tmp_path / "home"
    monkeypatch.setenv("OMNIDRAFT_HOME", str(home))
    monkeypatch.setattr("omnidraft.prompts.sharegpt", lambda n: CHAT_PROMPTS[:n])  # the test tier has no ShareGPT
    drafter, target = models
    config = tmp_path / "round.json"  # a round after 4 records, so the daemon trains on the stream
    config.write_text(json.dumps({"min_records": 4, "max_records": 8, "eval_records": 2, "replay": 0}))
    opts = UsageOptions(drafter, target, code=2, chat=2, recurring=2, held=1, busy_block=5, stream_tokens=8,
                        max_new_tokens=8, dtype="fp32", measure_every=5, daemon_config=str(config),
                        drain_minutes=2.0, calibration_s=1.0, rows=())
    out = tmp_path / "results"
    root = tmp_path / "scratch"
    got = run_usage(opts, out=out, root=root)
    assert os.environ["OMNIDRAFT_HOME"] == str(home)  # the scratch home was the run's only
    assert (root / "verlog.sqlite").is_file() and not (home / "verlog.sqlite").exists()
    assert got["stream_prompts"] == 10 and len(got["stream_log"]) == 10
    kinds = ["code", "chat", "tests", "extract", "reply"]
    assert [s["kind"] for s in got["stream_log"]] == kinds * 2  # the kinds take turns
    assert [s["daemon"] for s in got["stream_log"]] == [True] * 5 + [False] * 5  # running, then stopped (ABBA)
    busy = got["busy_stream"]
    assert busy["tokens"]["running"] > 0 and busy["tokens"]["stopped"] > 0 and busy["ratio"] > 0
    assert got["rounds"], "the daemon ran no round on the stream's records"
    assert got["drained"]  # it trained on every record before the last measurement
    assert got["kinds"] == kinds
    assert got["memory"]["spaces"][0]["entries"] >= 10 and got["memory"]["file_bytes"] > 0  # every answer kept (pairing's too)
    names = list(got["rows"])
    assert names[:2] == ["starting pair", "target alone (before)"]
    assert names[-5:] == ["cold pair", "memory only", "last version", "last version + memory", "target alone (after)"]
    start = got["rows"]["starting pair"]
    assert all(start[k]["tokens"] == 8 for k in kinds) and start["tokens"] == 40
    assert got["rows"]["target alone (before)"]["forwards_per_token"] == pytest.approx(1.0, abs=0.07)
    assert got["rows"]["cold pair"]["tokens"] == got["rows"]["last version + memory"]["tokens"] == 40
    assert set(got["summary"]) == {"memory only", "last version", "last version + memory"}
    assert got["summary"]["last version + memory"]["all"]["vs_cold_pair"] > 0
    assert got["commit"] and got["options"]["held"] == 1
    md = sorted(out.glob("bench-usage-*.md"))[-1].read_text()
    assert "First run of this suite" in md and "| last version + memory |" in md and got["cpu"]["line"] in md
    assert "The busy stream:" in md
    assert json.loads((out / "history.jsonl").read_text())["rows"]["last version"]["tokens_per_s"] > 0


def test_side_by_side_runs_every_row_on_every_prompt_by_kind(tmp_path, monkeypatch, models):
    from omnidraft import Session
    from omnidraft.bench.rows import target_alone
    from omnidraft.pairs.settings import Runtime

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    drafter, target = models
    runtime = Runtime(dtype="fp32")
    session = Session(drafter, target, runtime=runtime)  # logging, as the usage stream's
    alone = target_alone(target, Runtime(target=session.target_runtime, dtype="fp32"))
    got = side_by_side(session, [("code", "def f(x):", False), ("chat", CHAT_PROMPTS[0], True),
                                 ("code", "class A:", False)], 6, [alone])
    assert set(got) == {"pair", alone.name}
    for row in got.values():
        assert row["code"]["tokens"] == 12 and row["chat"]["tokens"] == 6 and row["all"]["tokens"] == 18
    assert got[alone.name]["all"]["acceptance"] is None  # the target alone drafts nothing
    assert session.log.count(session.spec.name) == 0  # measurements leave no training record


def test_bad_usage_options_are_one_line_errors(capsys, tmp_path):
    with pytest.raises(OmniDraftError, match="no usage row 'serve'"):
        UsageOptions(rows=("serve",))
    with pytest.raises(OmniDraftError, match="held-out"):
        UsageOptions(held=0)
    with pytest.raises(OmniDraftError, match=r"recurring \(--stream\) must be >= 0"):
        UsageOptions(recurring=-1)
    with pytest.raises(OmniDraftError, match="busy_block must be >= 1"):
        UsageOptions(busy_block=0)
    with pytest.raises(OmniDraftError, match="no daemon config"):
        UsageOptions(daemon_config=str(tmp_path / "missing.json"))
    assert main(["bench", "usage", "--clients", "2"]) == 2
    assert "--clients: not an option of the usage suite" in capsys.readouterr().err
    assert main(["bench", "pair", "--held", "3", "--stream-tokens", "9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--held, --stream-tokens: not an option of the pair suite" in err[0]


def test_a_stream_of_recurring_work_alone_keeps_code_and_chat_as_the_held_out_control(monkeypatch):
    from omnidraft.bench.usage import _prompts
    from omnidraft.recurring import recurring

    monkeypatch.setattr("omnidraft.prompts.sharegpt", lambda n: CHAT_PROMPTS[:n])
    stream, held = _prompts(UsageOptions(code=0, chat=0, recurring=2, held=1))
    assert [k for k, _, _ in stream] == ["tests", "extract", "reply"] * 2 and all(chat for _, _, chat in stream)
    assert [k for k, _, _ in held] == ["code", "chat", "tests", "extract", "reply"]
    assert not {text for _, text, _ in held} & {text for _, text, _ in stream}  # held out: never in the stream
    assert held[2][1] == recurring("tests", 1, held=True)[0]


def test_the_daemon_is_never_frozen_inside_its_probe_of_the_generating_lock(tmp_path, monkeypatch):
    import subprocess
    import sys

    from omnidraft.bench.usage import _state, frozen
    from omnidraft.generating import free

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    (tmp_path / "daemon").mkdir()
    probe = ("import fcntl, os, time\nfd = os.open(os.environ['OMNIDRAFT_HOME'] + '/daemon/generating.lock', "
             "os.O_RDWR | os.O_CREAT)\nfcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(0.5)\n"
             "fcntl.flock(fd, fcntl.LOCK_UN)\ntime.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", probe], env=dict(os.environ), stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held" and not free()
        with frozen(child.pid):  # it holds the lock for 0.5 s more: stopped only once it let go
            assert _state(child.pid) == "T" and free()
        assert _state(child.pid) in ("S", "R")
    finally:
        child.kill()
        child.wait()


def test_the_daemon_runs_in_abba_blocks_and_starts_as_under_a_busy_stream(tmp_path, monkeypatch):
    from omnidraft.bench.usage import Busy
    from omnidraft.generating import idle
    from omnidraft.train import daemon

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(daemon, "start", lambda *a, **k: calls.append(("start", idle(quiet_s=0))) or 4242)
    monkeypatch.setattr(daemon, "started", lambda pid: True)
    monkeypatch.setattr(daemon, "stop", lambda: calls.append(("stop", None)))
    busy = Busy(UsageOptions(busy_block=2), lambda s: None)
    running = [busy.block(n) for n in range(1, 13)]
    assert running == [True] * 2 + [False] * 4 + [True] * 4 + [False] * 2  # ABBA: on, off, off, on, on, off
    assert calls == [("start", False), ("stop", None), ("start", False), ("stop", None)]  # a generation held
    assert busy.block(0) and calls[-1] == ("start", False)  # after the stream: running until drained
