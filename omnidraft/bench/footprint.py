"""`omnidraft bench footprint`: the memory each way of running a pair holds, read from /proc, never
estimated. Each row is a process of its own, run as a user runs it:

- ``serve``: `omnidraft serve` on the pair with its defaults (its fine-tuning daemon included; a
  fresh random API key, so its memory space is new), driven by one client through the ``openai``
  SDK on every turn of multi-turn conversations (the ``conversations`` and ``copy`` sets, each
  turn's earlier answers the server's own);
- ``serve-target``: the same with ``--drafter none`` (the target alone);
- ``serve-budget``: the pair served with ``--max-memory`` at the ``budget`` option (what it keeps
  resident when told how much it may hold);
- ``llama-server``: llama.cpp's own server on the target's GGUF (LLAMA_SERVER or PATH), what a user
  would run instead;
- ``generate``: one `omnidraft generate` of the pair (``--no-log``), start to exit;
- ``pair``: `omnidraft pair` in a scratch home whose model folders are this home's (programs
  exported, vocabulary mapped, costs timed, calibrated: a fresh pairing). Not a default row: it
  exports both programs (minutes);
- ``pair-next``: the same where the drafter's program is there already (README command 1, the
  demo, built it): the pairing a user runs next, the target's program exported.

A server row reports its RSS once serving (``ready``), its peak while answering (VmHWM) and once
idle after the answers (``steady``), the daemon it started apart (its own peak), its RSS split by
what holds it (omnidraft/measure/resident.py) and its tokens/s over the answers (speed must not
drop as memory does). A process row reports the largest peak RSS (VmHWM) of any process of its tree and the largest sum
of the tree's PSS, both sampled every half second (children that run side by side, such as the two
program exports of a pairing, add up; the pages a forked child shares with its parent count once).

Knows processes and /proc; nothing about what the parts inside them are.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from omnidraft.errors import OmniDraftError
from omnidraft.measure.resident import proportional, resident
from omnidraft.models.budget import status

ROWS = ("serve", "serve-target", "serve-budget", "llama-server", "generate", "pair", "pair-next", "demo")
PROCESS_ROWS = ("generate", "pair", "pair-next", "demo")
DEFAULT_ROWS = ("serve", "serve-target", "llama-server", "generate")
IDLE_S = 3.0  # after the last answer, before the steady reading
SAMPLE_S = 0.5  # between readings of a process tree's RSS
PROMPT = "def merge_intervals(intervals):"
QUESTION = ("How much memory does each way of running the pair hold (peak and steady RSS from /proc, by part), "
            "beside what a user would run instead?")


@dataclass(frozen=True)
class FootprintOptions:
    """``conversations``, ``copy``: prompt counts for the server rows (bench/prompts.py); ``budget``:
    the serve-budget row's --max-memory."""

    drafter: str = "smollm2-135m"
    target: str = "qwen2.5-coder-0.5b"
    threads: int = 2
    rows: tuple[str, ...] = DEFAULT_ROWS
    conversations: int = 2
    copy: int = 2
    max_new_tokens: int = 64
    budget: str = "1.5G"

    def __post_init__(self):
        from omnidraft.models.budget import parse_size

        parse_size(self.budget)
        bad = [r for r in self.rows if r not in ROWS]
        if bad or not self.rows:
            raise OmniDraftError(f"FootprintOptions.rows: unknown row {bad[0] if bad else '(none)'!r}",
                                 f"use some of {', '.join(ROWS)}")
        for name in ("conversations", "copy", "max_new_tokens", "threads"):
            if getattr(self, name) < (1 if name in ("max_new_tokens", "threads") else 0):
                raise OmniDraftError(f"FootprintOptions.{name} must be >= "
                                     f"{1 if name in ('max_new_tokens', 'threads') else 0}, got {getattr(self, name)}")


def children(pid: int) -> list[int]:
    """The live descendants of ``pid``."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(c) for t in os.listdir(f"/proc/{p}/task")
                    for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
        except OSError:
            continue
        out += kids
        todo += kids
    return out


def run_footprint(opts: FootprintOptions, *, out: str | Path = "bench/results", keep: bool = True,
                  log: Callable[[str], None] = lambda s: None) -> dict:
    """Run the rows one after another (never two at once); returns the result, also written under ``out``."""
    from omnidraft.device.threads import set_threads
    from omnidraft.measure.stamp import stamp

    set_threads(opts.threads)
    result = {**stamp("footprint", opts.threads, question=QUESTION, options=asdict(opts)), "headline": "peak_gb",
              "rows": {}}
    for name in opts.rows:
        log(f"{name}: starting")
        try:
            got = (_process_row if name in PROCESS_ROWS else _server_row)(name, opts, log)
        except OmniDraftError as err:  # a finding too: a budget the pair does not fit, say
            result["rows"][name] = {"error": err.problem}
            log(f"{name}: {err.problem}")
            continue
        if got is not None:
            result["rows"][name] = {**got, "peak_gb": round(got["peak_bytes"] / 1e9, 3)}
            log(f"{name}: {_brief(got)}")
    _write(result, out, keep)
    return result


def _server_row(name: str, opts: FootprintOptions, log) -> dict | None:
    from omnidraft.bench.prompts import prompt_sets
    from omnidraft.bench.servers import ServerRow, llama_server
    from omnidraft.models.loading import load_tokenizer

    tok = load_tokenizer(opts.target)
    if name == "llama-server":
        row = llama_server(opts.target, tok, log, threads=opts.threads)
        if row is None:
            return None
    else:
        cmd = [sys.executable, "-m", "omnidraft.cli", "serve", "--target", opts.target, "--threads",
               str(opts.threads), "--drafter", "none" if name == "serve-target" else opts.drafter,
               *(["--max-memory", opts.budget] if name == "serve-budget" else [])]
        row = ServerRow(f"omnidraft {name}", cmd, tok, health="/health", key_flag="--api-key",
                        threads=opts.threads, log=log)
    try:
        pid = row.proc.pid
        ready = status(pid).get("VmRSS", 0)
        tokens = seconds = 0.0
        for prompt in prompt_sets({"conversations": opts.conversations, "copy": opts.copy}):
            run = row.run(row.answer(prompt, opts.max_new_tokens), opts.max_new_tokens)
            tokens, seconds = tokens + run.tokens, seconds + run.seconds
        time.sleep(IDLE_S)
        now = status(pid)
        helpers = {p: status(p) for p in children(pid)}
        return {"ready_bytes": ready, "steady_bytes": now.get("VmRSS"), "peak_bytes": now.get("VmHWM"),
                "children": [{"pid": p, "rss_bytes": s.get("VmRSS"), "peak_bytes": s.get("VmHWM")}
                             for p, s in helpers.items() if s],
                "parts": {k: v for k, v in resident(pid).items() if k not in ("total", "peak")},
                "tokens": int(tokens), "tokens_per_s": round(tokens / seconds, 2) if seconds else None}
    finally:
        row.close()


def _process_row(name: str, opts: FootprintOptions, log) -> dict:
    from omnidraft.export.layout import program_dir
    from omnidraft.home import home, scratch_home
    from omnidraft.pairs.programs import DRAFTER_QUANT, MAX_SEQ

    env = dict(os.environ)
    if name == "generate":
        cmd = ["generate", "--drafter", opts.drafter, "--target", opts.target, "--prompt", PROMPT,
               "--max-new-tokens", str(opts.max_new_tokens), "--no-log", "--threads", str(opts.threads)]
    else:  # a pairing, or the demo (README command 1), in a scratch home: the programs are exported there again
        root = scratch_home(home() / "footprint-runs" / time.strftime("%Y%m%d-%H%M%S"))
        if (root / "programs").is_symlink():
            (root / "programs").unlink()
        if name == "pair-next":  # this home's drafter program, as the demo left it
            drafter = program_dir(opts.drafter, DRAFTER_QUANT, MAX_SEQ)
            if not (drafter / "program.pte").is_file():
                raise OmniDraftError(f"footprint: pair-next needs {opts.drafter}'s program in this home",
                                     f"run `omnidraft export --drafter {opts.drafter} --quant {DRAFTER_QUANT}`")
            (root / "programs").mkdir()
            (root / "programs" / drafter.name).symlink_to(drafter)
        env["OMNIDRAFT_HOME"] = str(root)
        cmd = (["demo"] if name == "demo" else
               ["pair", "--drafter", opts.drafter, "--target", opts.target, "--threads", str(opts.threads)])
        log(f"{name}: scratch home {root} (the programs are exported there again)")
    peak, tree, seconds = peak_of([sys.executable, "-m", "omnidraft.cli", *cmd], env)
    return {"peak_bytes": peak, "tree_peak_bytes": tree, "seconds": seconds, "command": "omnidraft " + " ".join(cmd)}


def peak_of(argv: list[str], env: dict | None = None) -> tuple[int, int, float]:
    """Run ``argv`` to its end: (the largest VmHWM any process of its tree reached, the largest sum of
    the tree's PSS (measure/resident.py ``proportional``: shared pages counted once), both read every
    SAMPLE_S; seconds). Not the kernel's ru_maxrss: a child forked
    from a large process (a test worker) inherits its parent's high-water mark across exec. A
    failure is an error with its last line of output."""
    t0, peak, tree = time.perf_counter(), 0, 0
    with tempfile.TemporaryFile("w+") as err:  # its progress lines, read back only if it fails
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        while proc.poll() is None:
            pids = (proc.pid, *children(proc.pid))
            now = [status(p) for p in pids]
            peak = max(peak, *(s.get("VmHWM", 0) for s in now))
            if sum(s.get("VmRSS", 0) for s in now) > tree:  # PSS <= RSS: read it (page tables walked) only then
                tree = max(tree, sum(proportional(p) for p in pids))
            time.sleep(SAMPLE_S)
        if proc.returncode != 0:
            err.seek(0)
            raise OmniDraftError(f"footprint: `{' '.join(argv)}` exited with {proc.returncode}",
                                 (err.read().strip().splitlines() or ["no output"])[-1])
    return peak, tree, round(time.perf_counter() - t0, 1)


def _gb(n: int | None) -> str:
    return "" if n is None else f"{n / 1e9:.2f} GB"


def _brief(row: dict) -> str:
    if "steady_bytes" in row:
        return (f"ready {_gb(row['ready_bytes'])}, peak {_gb(row['peak_bytes'])}, steady {_gb(row['steady_bytes'])}, "
                f"{row['tokens_per_s']} tokens/s")
    return f"peak {_gb(row['peak_bytes'])} in {row['seconds']} s"


def markdown(result: dict) -> list[str]:
    o = result["options"]
    md = [result["question"], "",
          f"Drafter {o['drafter']}, target {o['target']}, {o['threads']} threads. Server rows: one client, every "
          f"turn of {o['conversations']} three-turn conversations and {o['copy']} copy-heavy prompts, greedy, "
          f"{o['max_new_tokens']} new tokens; steady = {IDLE_S:.0f} s after the last answer; serve-budget: "
          f"`--max-memory {o.get('budget')}`.", "",
          "| row | ready | peak | steady | its children (peak) | tokens/s |", "|---|---|---|---|---|---|"]
    parts = []
    for name, row in result["rows"].items():
        if "error" in row:
            md.append(f"| {name} | did not run: {row['error']} | | | | |")
        elif "steady_bytes" in row:
            kids = ", ".join(_gb(c["peak_bytes"]) for c in row["children"]) or "none"
            md.append(f"| {name} | {_gb(row['ready_bytes'])} | {_gb(row['peak_bytes'])} | {_gb(row['steady_bytes'])} "
                      f"| {kids} | {row['tokens_per_s']} |")
            parts.append(f"- {name}: " + ", ".join(f"{k} {_gb(v)}" for k, v in
                                                     sorted(row["parts"].items(), key=lambda kv: -kv[1]) if v > 5e6))
        else:
            md.append(f"| {name} (`{row['command']}`, {row['seconds']} s) | | {_gb(row['peak_bytes'])} "
                      f"(its tree at once, PSS: {_gb(row['tree_peak_bytes'])}) | | | |")
    return md + (["", "Steady RSS by what holds it:", "", *parts] if parts else [])


def _write(result: dict, out: str | Path, keep: bool) -> Path:
    from omnidraft.measure import report

    return report.write(out, "bench-footprint", "omnidraft bench footprint: the memory each way of running the pair "
                        "holds", result, markdown(result), keep=keep)
