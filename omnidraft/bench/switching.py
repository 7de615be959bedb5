"""`omnidraft bench switching`: an assistant app's conversations visited in turn on one Session,
and after a restart. Does a conversation that comes back start as fast as a follow-up in the one
just used?

Each of ``conversations`` conversations opens with a pasted module (the first MODULE_CHARS
characters of one of OmniDraft's own source files, as the commit has them: SOURCES, then the
package's other files long enough, by name) and a question; a
follow-up comes at once (the conversation just used), then every conversation is visited again
in turn (others ran since), then the Session is closed and opened again over the same home and the
first ``restarts`` conversations get one more follow-up (a restart). Rows, one after another, each
a Session of its own (greedy, ``max_new_tokens`` tokens an answer):

- ``read``: no saved states (``Runtime(cache_ram_mib=0)``, one slot: a conversation that comes
  back is read again from its first token);
- ``states``: saved conversation states as by default (``cache_ram_mib`` the option's, by default
  the Runtime's default), written through to a scratch folder (pairs/conversations.py);
  ``states-N``: with N MiB in RAM;
- ``restart``: a conversation of ``restart_tokens`` tokens or more on `omnidraft serve`, killed with
  SIGKILL and started again (bench/restart.py).

Each reports the median time to the first piece of text of each kind of turn, the prompt tokens
restored from RAM and from disk, the process's largest RSS after any turn of the visits and the
states' bytes in RAM then, and whether its answers equal the ``read`` row's (restoring must change
nothing).

Knows Session and the clock; nothing about how states are kept.
"""

from __future__ import annotations

import functools
import gc
import statistics
from collections import Counter
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from omnidraft.errors import OmniDraftError
from omnidraft.pairs.settings import DEFAULT_CACHE_RAM_MIB

ROWS = ("read", "states", "restart")  # and states-N
MODULE_CHARS = 2400  # ~600 target tokens a module: a conversation fits a 1,024-position program
SOURCES = ("session.py", "pairs/conversations.py", "pairs/router.py", "decode/loop.py", "decode/verify.py",
           "pairs/routing.py", "memory/config.py", "serve/runner.py", "translate/align.py", "decode/text.py",
           "models/slots.py", "pairs/deferred.py")
QUESTIONS = ("What does this module do? Answer in two sentences.", "Name one function in it and what it returns.",
             "Which part would you test first, and why?", "Suggest one clearer name for something in it.")
QUESTION = "Does a conversation that comes back start as fast as a follow-up in the one just used, also after a restart?"


@dataclass(frozen=True)
class SwitchingOptions:
    drafter: str | None = "smollm2-135m"
    target: str = "qwen2.5-coder-0.5b"
    threads: int = 2
    rows: tuple[str, ...] = ROWS
    conversations: int = 8
    restarts: int = 2
    max_new_tokens: int = 24
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB
    restart_tokens: int = 2000

    def __post_init__(self):
        bad = [r for r in self.rows if _ram(r, 1) is None]
        if bad or not self.rows:
            raise OmniDraftError(f"SwitchingOptions.rows: unknown row {bad[0] if bad else '(none)'!r}",
                                 f"use some of {', '.join(ROWS)}, or states-N (N MiB in RAM)")
        most = len(_sources())
        if not 2 <= self.conversations <= most:
            raise OmniDraftError(f"SwitchingOptions.conversations must be in 2..{most}, got {self.conversations}")
        if not 0 <= self.restarts <= self.conversations:
            raise OmniDraftError(f"SwitchingOptions.restarts must be in 0..conversations, got {self.restarts}")
        if self.max_new_tokens < 1 or self.cache_ram_mib < 1 or self.restart_tokens < 1:
            raise OmniDraftError("SwitchingOptions.max_new_tokens, cache_ram_mib and restart_tokens must be >= 1")


def _ram(row: str, default: int) -> int | None:
    """MiB of states in RAM a row keeps (0: read), None for no such row."""
    name, _, mib = row.partition("-")
    if row in ROWS:
        return 0 if row == "read" else default  # restart: the server's default
    return int(mib) if name == "states" and mib.isdigit() and int(mib) > 0 else None


@functools.cache
def _sources() -> list[Path]:
    root = Path(__file__).resolve().parents[1]
    others = sorted(p for p in root.rglob("*.py") if p.relative_to(root).as_posix() not in SOURCES
                    and p.stat().st_size >= MODULE_CHARS)
    return [root / name for name in SOURCES] + others


def modules(n: int) -> list[str]:
    """The first ``n`` pasted modules."""
    return [path.read_text()[:MODULE_CHARS] for path in _sources()[:n]]


def run_switching(opts: SwitchingOptions, *, out: str | Path = "bench/results", keep: bool = True,
                  log: Callable[[str], None] = lambda s: None) -> dict:
    """Run the rows one after another; returns the result, also written under ``out``."""
    from omnidraft.device.threads import set_threads
    from omnidraft.measure.stamp import stamp

    set_threads(opts.threads)
    result = {**stamp("switching", opts.threads, question=QUESTION, options=asdict(opts)), "rows": {}}
    answers = {}
    for name in opts.rows:
        log(f"{name}: starting")
        if name == "restart":
            from omnidraft.bench.restart import run_restart

            result["rows"][name] = run_restart(opts, modules, log)
            log(f"{name}: " + ", ".join(f"{k} {v}" for k, v in result["rows"][name]["first_token_s"].items()))
            continue
        with tempfile.TemporaryDirectory(prefix="omnidraft-states-") as folder:
            row, answers[name] = _row(name, opts, Path(folder), log)
        if "read" in answers and name != "read":
            pairs = list(zip(answers[name], answers["read"]))
            row["equal_to_read"] = sum(a == b for a, b in pairs)
            row["answers"] = len(pairs)
            exact = [(a, b) for a, b in pairs if a[1] == b[1] == "executorch"]  # both on the bit-exact program
            row["equal_on_program"] = [sum(a == b for a, b in exact), len(exact)]
        result["rows"][name] = row
        log(f"{name}: " + ", ".join(f"{k} {v}" for k, v in row["first_token_s"].items()))
    _write(result, out, keep)
    return result


def _row(name: str, opts: SwitchingOptions, folder: Path, log) -> tuple[dict, list[str]]:
    from omnidraft.models.budget import rss_bytes
    from omnidraft.pairs.settings import Runtime
    from omnidraft.session import Session

    runtime = Runtime(threads=opts.threads, cache_ram_mib=_ram(name, opts.cache_ram_mib), state_dir=str(folder))

    def open_():
        return Session(opts.drafter, opts.target, runtime=runtime, log=False, memory=False)

    talks = [[{"role": "user", "content": f"```python\n{code}\n```\n{QUESTIONS[0]}"}]
             for code in modules(opts.conversations)]
    times: dict[str, list[float]] = {"first turn": [], "just used": [], "came back": [], "after a restart": []}
    restored = {"ram": 0, "disk": 0}
    answers: list[tuple[str, str]] = []  # (text, the target runtime it ran on)
    rss = held = 0
    session = open_()

    def turn(i: int, kind: str, question: str | None) -> None:
        nonlocal rss, held
        if question is not None:
            talks[i] += [{"role": "user", "content": question}]
        t0, first, pieces = time.perf_counter(), None, session.pieces(talks[i], max_new_tokens=opts.max_new_tokens)
        text = []
        try:
            while True:
                piece = next(pieces)
                first = first or time.perf_counter() - t0
                text.append(piece.text)
        except StopIteration as stop:
            m = stop.value.metrics
        times[kind].append(first if first is not None else time.perf_counter() - t0)
        if m.get("restored_from"):
            restored[m["restored_from"]] += m.get("prompt_restored", 0)
        answers.append(("".join(text), m.get("target_runtime", "?")))
        talks[i] += [{"role": "assistant", "content": answers[-1][0]}]
        now, states = rss_bytes(), session.conversations.states
        if kind != "after a restart" and now > rss:
            rss, held = now, states.held()["ram"] if states is not None else 0

    try:
        for i in range(opts.conversations):
            turn(i, "first turn", None)
            turn(i, "just used", QUESTIONS[1])
            log(f"{name}: conversation {i + 1}/{opts.conversations} opened")
        for i in range(opts.conversations):
            turn(i, "came back", QUESTIONS[2])
        session.close()
        session = None  # the first Session's models go before the second's load: a restart
        gc.collect()
        session = open_()
        for i in range(opts.restarts):
            turn(i, "after a restart", QUESTIONS[3])
    finally:
        if session is not None:
            session.close()
    return {"first_token_s": {k: round(statistics.median(v), 3) for k, v in times.items() if v},
            "restored_tokens": restored, "rss_bytes": rss, "states_ram_bytes": held,
            "runtimes": dict(Counter(r for _, r in answers))}, answers


def markdown(result: dict) -> list[str]:
    from omnidraft.measure.report import table

    o = result["options"]
    kinds = ("first turn", "just used", "came back", "after a restart")
    rows = []
    for name, row in result["rows"].items():
        if name == "restart":
            continue
        t = row["first_token_s"]
        equal = f"{row['equal_to_read']}/{row['answers']}" if "answers" in row else "-"
        if "equal_on_program" in row:
            equal += " ({}/{} both on the program)".format(*row["equal_on_program"])
        rows.append([name, *(t.get(k, "-") for k in kinds),
                     f"{t['came back'] / t['just used']:.2f}x" if t.get("just used") else "-",
                     f"{row['restored_tokens']['ram']} / {row['restored_tokens']['disk']}",
                     f"{row['rss_bytes'] / 1e9:.2f} GB", f"{row.get('states_ram_bytes', 0) / 2**20:.0f} MiB",
                     ", ".join(f"{k} {v}" for k, v in sorted(row.get("runtimes", {}).items())) or "-", equal])
    return [result["question"], "",
            f"Drafter {o['drafter']}, target {o['target']}, {o['threads']} threads; {o['conversations']} conversations "
            f"each opened with a pasted module (~{MODULE_CHARS} characters), a follow-up at once, every one visited "
            f"again in turn, then the first {o['restarts']} after the Session was opened again; greedy, "
            f"{o['max_new_tokens']} tokens an answer; states: `--cache-ram {o['cache_ram_mib']}` (states-N: N). "
            "Median seconds to the first text; RSS: the largest after a turn of the visits, with the states then "
            "in RAM.", "",
            *(table(["row", "first turn (s)", "just used (s)", "came back (s)", "after a restart (s)",
                     "came back / just used", "prompt tokens restored, RAM / disk", "RSS (largest)",
                     "states in RAM", "answers by target runtime", "answers equal to read's"], rows) if rows else []),
            *_restart_lines(result)]


def _restart_lines(result: dict) -> list[str]:
    from omnidraft.measure.report import table

    row = result["rows"].get("restart")
    if row is None:
        return []
    t = row["first_token_s"]
    return ["", f"Restart (`omnidraft serve`, defaults; a {row['conversation_tokens']}-token conversation, the "
            "server killed with SIGKILL and started again on the same state folder; seconds to the first text):", "",
            *table(["first turn (s)", "warm follow-up (s)", "after kill -9 (s)", "after kill -9 / warm", "runtimes",
                    "answer equal to the target alone's"],
                   [[t["first turn"], t["warm"], t["after kill -9"], f"{t['after kill -9'] / t['warm']:.2f}x",
                     ", ".join(row["runtimes"]), "yes" if row["equal_to_target_alone"] else "NO"]])]


def _write(result: dict, out: str | Path, keep: bool) -> Path:
    from omnidraft.measure import report

    return report.write(out, "bench-switching", "omnidraft bench switching: conversations visited in turn",
                        result, markdown(result), keep=keep)
