"""How omnidraft/remote/llamacpp.py reports a llama-cpp-python server that ended by itself: the signal
by name and its last printed line (stop 81's CI lost four tests to a server dying with no word)."""

import signal
import subprocess
import sys
import tempfile

from omnidraft.remote.llamacpp import _ended


def _run(code: str) -> str:
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT)
        proc.wait(30)
        return _ended(proc, log)


def test_a_crash_is_named_by_its_signal_with_the_last_line_printed():
    said = _run(f"import os, signal; print('loading model'); print('ggml: computing', flush=True); "
                f"os.kill(os.getpid(), signal.{signal.SIGILL.name})")
    assert said == "killed by SIGILL; it printed: ggml: computing"


def test_an_exit_is_named_by_its_code():
    assert _run("import sys; sys.exit(3)") == "exit code 3"
