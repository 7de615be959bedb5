"""Build the ExecuTorch programs a pair runs on (the drafter's and the target's), once.

Missing programs are exported by `omnidraft export` in child processes, one after the other
(AT_ONCE), while one status line shows each export's stage and time. A program that already exists is reused (one an
earlier version's export made is built again: export/info.py FORMAT); an export that fails is reported in one line and the pair runs that model on eager PyTorch (runtime
``auto``). Knows the program folders and the export command's stage lines; nothing about
lowering itself (export/lower.py).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from omnidraft.export.layout import program_dir
from omnidraft.pairs.build import TARGET_QUANT, is_remote

DRAFTER_QUANT = "8da8w"
MAX_SEQ = 1024
# exports at a time: each lowers its two methods in two processes already; the drafter's and the
# 1.5B target's side by side took 490 s against 545 one after the other, but 11.55 GB at once
# against 8.73 (the processes' PSS summed; AMD EPYC, 2 cores: docs/programs.md)
AT_ONCE = 1


@dataclass
class _Job:
    label: str  # "smollm2-135m (drafter)"
    argv: list[str]
    proc: subprocess.Popen | None = None
    stage: str = "starting"
    t0: float = field(default_factory=time.perf_counter)
    error: str = ""
    seconds: float = 0.0  # how long it took, once it ended


def missing(drafter: str | None, target: str, max_seq: int = MAX_SEQ, *,
            target_program: bool = True) -> list[tuple[str, list[str]]]:
    """(label, export arguments) for each program the pair would run on that is not built yet
    (``drafter`` None: the target alone; ``target_program`` False: the target runs elsewhere,
    its GGUF on llama.cpp, say)."""
    out = []
    if drafter is not None and not _current(program_dir(drafter, DRAFTER_QUANT, max_seq)):
        out.append((f"{drafter} (drafter)", ["--drafter", drafter, "--quant", DRAFTER_QUANT]))
    if target_program and not is_remote(target) and not _current(program_dir(target, TARGET_QUANT, max_seq,
                                                                             role="target")):
        out.append((f"{target} (target)", ["--target", target, "--quant", TARGET_QUANT]))
    return [(label, [*args, "--max-seq", str(max_seq)]) for label, args in out]


def _current(folder) -> bool:
    """A program is in ``folder``, made by this version's export."""
    from omnidraft.errors import OmniDraftError
    from omnidraft.export.info import ProgramInfo

    if not (folder / "program.pte").is_file():
        return False
    try:
        return ProgramInfo.load(folder / "program.json").current
    except OmniDraftError:
        return False


def _stage(line: str) -> str | None:
    """The stage an `omnidraft export` stderr line announces: its "export: ..." lines, and the
    model fetch's "[omnidraft] ..." progress lines before them."""
    line = line.strip()
    if line.startswith("export: "):
        return line.removeprefix("export: ").split(" (")[0].split(" of ")[0]
    if line.startswith("[omnidraft] "):
        return line.removeprefix("[omnidraft] ").split(":")[0][:48]
    return None


def ensure(drafter: str | None, target: str, *, say: Callable[..., None], max_seq: int = MAX_SEQ,
           live: bool | None = None, target_program: bool = True, at_once: int = AT_ONCE) -> dict[str, str]:
    """Export what is missing (see ``missing``), ``at_once`` at a time; {label: "built in N s" | the
    error line}. ``live`` (default: stderr is a terminal): one status line rewritten every second;
    otherwise a line each time a stage changes, and every 30 s."""
    todo = missing(drafter, target, max_seq, target_program=target_program)
    if not todo:
        return {}
    say(f"building {len(todo)} ExecuTorch program{'s' if len(todo) > 1 else ''} (one time, a few minutes): "
        + ", ".join(label for label, _ in todo))
    lines: queue.Queue = queue.Queue()
    jobs = [_Job(label, [sys.executable, "-m", "omnidraft.cli", "export", *args]) for label, args in todo]
    live = sys.stderr.isatty() if live is None else live
    shown, last = "", time.perf_counter()
    try:
        while _start(jobs, lines, at_once) or not lines.empty():
            try:
                job, line = lines.get(timeout=1.0)
                stage = _stage(line)
                if stage:
                    job.stage = stage
                elif line.startswith("omnidraft: error:"):
                    job.error = line.strip().removeprefix("omnidraft: ")
            except queue.Empty:
                pass
            status = " | ".join(_status(j) for j in jobs)
            stages = " | ".join(_state(j) for j in jobs)
            if live:
                say("\r  " + status + " " * 4, end="")
            elif stages != shown or time.perf_counter() - last > 30:
                say("  " + status)
                shown, last = stages, time.perf_counter()
    except BaseException:
        for j in jobs:
            if j.proc is not None:
                j.proc.kill()
        raise
    if live:
        say("")
    out = {}
    for j in jobs:
        _state(j)  # its time, if the loop ended before it was looked at
        if j.proc.returncode == 0:
            out[j.label] = f"built in {j.seconds:.0f} s"
        else:
            out[j.label] = j.error or f"export failed (exit {j.proc.returncode})"
            say(f"  {j.label}: {out[j.label]}; it runs on eager PyTorch")
    return out


def _start(jobs: list[_Job], lines: queue.Queue, at_once: int) -> bool:
    """Start waiting jobs while fewer than ``at_once`` run; whether any is running or waiting."""
    running = [j for j in jobs if j.proc is not None and j.proc.poll() is None]
    for job in [j for j in jobs if j.proc is None][:max(0, at_once - len(running))]:
        job.t0 = time.perf_counter()
        job.proc = subprocess.Popen(job.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                    env={**os.environ, "PYTHONWARNINGS": "ignore"})
        threading.Thread(target=_pump, args=(job, lines), daemon=True).start()
        running.append(job)
    return bool(running) or any(j.proc is None for j in jobs)


def _pump(job: _Job, lines: queue.Queue) -> None:
    for line in job.proc.stderr:
        lines.put((job, line))


def _state(job: _Job) -> str:
    if job.proc is None:
        return "waiting"
    if job.proc.poll() is None:
        return job.stage
    job.seconds = job.seconds or time.perf_counter() - job.t0
    return "done" if job.proc.returncode == 0 else "failed"


def _status(job: _Job) -> str:
    state = _state(job)
    if job.proc is None:
        return f"{job.label}: {state}"
    t = job.seconds or time.perf_counter() - job.t0
    return f"{job.label}: {state} {int(t // 60)}:{int(t % 60):02d}"
