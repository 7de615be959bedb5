"""The device's one "a generation runs" signal (omnidraft/generating.py): held by any number of
generations at once, seen by the daemon's probe, released by the kernel when a holder is killed,
and stamped when the last one ended. And a Session's generation holds it."""

import os
import signal
import subprocess
import sys
import threading

from omnidraft.generating import free, generating, idle

from .test_session import FP32, models  # noqa: F401  (the tiny pair the Session tests run)


def test_a_generation_in_flight_is_seen_and_its_end_is_stamped(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    assert idle(quiet_s=0)
    with generating():
        with generating():  # two at once (a server's slots, two Sessions)
            assert not idle(quiet_s=0)
        assert not idle(quiet_s=0)
    assert idle(quiet_s=0) and not idle(quiet_s=60)  # it ended just now


def test_free_says_whether_a_generation_would_wait_for_an_exclusive_hold(tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    assert free()
    with generating():
        assert free()  # generations share it
    fd = os.open(tmp_path / "daemon" / "generating.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the daemon's probe, caught in the act
    try:
        assert not free()
    finally:
        os.close(fd)
    assert free()


def test_a_killed_generator_releases_the_signal(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    holder = subprocess.Popen([sys.executable, "-c", "import time\nfrom omnidraft.generating import generating\n"
                               "with generating():\n    print('held', flush=True)\n    time.sleep(600)"],
                              env=dict(os.environ), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not idle(quiet_s=0)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        assert idle(quiet_s=0)  # the kernel let go of its lock
    finally:
        holder.kill()


def test_a_session_generation_holds_it_while_it_streams(tmp_path, monkeypatch, models):
    from omnidraft import Session

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    s = Session(*models, runtime=FP32, log=False, memory=False)
    stream = s.stream("def add(a, b):\n", max_new_tokens=8)
    next(stream)  # the generation is open, its caller reading
    seen = []
    t = threading.Thread(target=lambda: seen.append(idle(quiet_s=0)))  # another thread, as the daemon's probe
    t.start()
    t.join()
    assert seen == [False]
    for _ in stream:
        pass
    assert idle(quiet_s=0) and not idle(quiet_s=60)
    s.close()
