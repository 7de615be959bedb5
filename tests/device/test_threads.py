"""device/threads.py: MKL kept single-threaded on the calling thread during a program call (and
restored after), and the C++ side's pool-creation lines filtered from file descriptor 2 while
everything else written there still reaches the user."""

import os

import pytest


def test_program_call_keeps_mkl_single_threaded_and_restores():
    """During a program call MKL runs one thread on the calling thread; the setting before it
    comes back afterwards (torch's own matmuls keep their threads)."""
    from omnidraft.device import threads

    fn = threads._set_local()
    if fn is None:
        pytest.skip("this torch build has no MKL")
    before = fn(3)  # 3 as this thread's own setting, to see it restored
    try:
        with threads.program_call():
            assert fn(1) == 1  # inside: 1 (fn returns the previous value)
        assert fn(3) == 3
    finally:
        fn(before)


def test_native_stderr_filter_keeps_other_lines(capfd):
    from omnidraft.device.threads import native_stderr_without

    with native_stderr_without(("[cpuinfo_utils.cpp:",)):
        os.write(2, b"[cpuinfo_utils.cpp:71] Reading file /sys/x\n")
        os.write(2, b"E 00:00 real error from C++\n")
    err = capfd.readouterr().err
    assert "real error from C++" in err and "cpuinfo" not in err


def test_configure_process_leaves_an_imported_torch_alone(monkeypatch):
    """torch is loaded in the test process: MKL's default cannot change any more, so nothing is set."""
    from omnidraft.device import threads

    monkeypatch.delenv(threads.ENV, raising=False)
    threads.configure_process()
    assert threads.ENV not in os.environ
