"""Starting a vLLM server leaves nothing running when it does not come up: here a stand-in for
vLLM's Python that never answers (the real server's tests are test_real_vllm.py)."""

import os
import signal
import stat

import pytest

from omnidraft.errors import OmniDraftError
from omnidraft.vllm.launch import start


def _never_answers(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\nexec sleep 120\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_server_that_does_not_answer_in_time_is_killed_and_named(tmp_path):
    with pytest.raises(OmniDraftError, match="did not answer within"):
        start(_never_answers(tmp_path), "m", name="m", key="k", log=tmp_path / "log", timeout=3)
    assert _gone(int((tmp_path / "pid").read_text()))


def test_a_server_interrupted_while_starting_is_killed(tmp_path):
    """A bench run stopped (Ctrl-C, or SIGTERM, which the CLI turns into the same) while vLLM starts
    leaves no server behind."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 2.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            start(_never_answers(tmp_path), "m", name="m", key="k", log=tmp_path / "log", timeout=60)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert _gone(int((tmp_path / "pid").read_text()))
