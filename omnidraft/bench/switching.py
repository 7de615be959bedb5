"""`omnidraft bench switching`: an assistant app's conversations visited in turn on one Session,
and after a restart. Does a conversation that comes back start as fast as a follow-up in the one
just used?

Each of ``conversations`` conversations opens with a pasted module (the first MODULE_CHARS
characters of one of OmniDraft's own source files, as the commit has them) and a question; a
follow-up comes at once (the conversation just used), then every conversation is visited again
in turn (others ran since), then the Session is closed and opened again over the same home and the
first ``restarts`` conversations get one more follow-up (a restart). Rows, one after another, each
a Session of its own (greedy, ``max_new_tokens`` tokens an answer):

- ``read``: the Session as it runs by default (one slot: a conversation that comes back is read
  again from its first token);
- ``states``: with saved conversation states (``Runtime(cache_ram_mib=...)``, written through to a
  scratch folder: pairs/conversations.py).

Each reports the median time to the first piece of text of each kind of turn, the prompt tokens
restored from RAM and from disk, the process's RSS after the visits, and whether its answers equal
the ``read`` row's (restoring must change nothing).

Knows Session and the clock; nothing about how states are kept.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from omnidraft.errors import OmniDraftError

ROWS = ("read", "states")
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
    cache_ram_mib: int = 2048

    def __post_init__(self):
        bad = [r for r in self.rows if r not in ROWS]
        if bad or not self.rows:
            raise OmniDraftError(f"SwitchingOptions.rows: unknown row {bad[0] if bad else '(none)'!r}",
                                 f"use some of {', '.join(ROWS)}")
        if not 2 <= self.conversations <= len(SOURCES):
            raise OmniDraftError(f"SwitchingOptions.conversations must be in 2..{len(SOURCES)}, "
                                 f"got {self.conversations}")
        if not 0 <= self.restarts <= self.conversations:
            raise OmniDraftError(f"SwitchingOptions.restarts must be in 0..conversations, got {self.restarts}")
        if self.max_new_tokens < 1 or self.cache_ram_mib < 1:
            raise OmniDraftError("SwitchingOptions.max_new_tokens and cache_ram_mib must be >= 1")


def modules(n: int) -> list[str]:
    """The first ``n`` pasted modules."""
    root = Path(__file__).resolve().parents[1]
    return [(root / name).read_text()[:MODULE_CHARS] for name in SOURCES[:n]]


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
        with tempfile.TemporaryDirectory(prefix="omnidraft-states-") as folder:
            row, answers[name] = _row(name, opts, Path(folder), log)
        if "read" in answers and name != "read":
            row["equal_to_read"] = sum(a == b for a, b in zip(answers[name], answers["read"]))
            row["answers"] = len(answers[name])
        result["rows"][name] = row
        log(f"{name}: " + ", ".join(f"{k} {v}" for k, v in row["first_token_s"].items()))
    _write(result, out, keep)
    return result


def _row(name: str, opts: SwitchingOptions, folder: Path, log) -> tuple[dict, list[str]]:
    from omnidraft.models.budget import rss_bytes
    from omnidraft.pairs.settings import Runtime
    from omnidraft.session import Session

    runtime = Runtime(threads=opts.threads, **({"cache_ram_mib": opts.cache_ram_mib, "state_dir": str(folder)}
                                               if name == "states" else {}))

    def open_():
        return Session(opts.drafter, opts.target, runtime=runtime, log=False, memory=False)

    talks = [[{"role": "user", "content": f"```python\n{code}\n```\n{QUESTIONS[0]}"}]
             for code in modules(opts.conversations)]
    times: dict[str, list[float]] = {"first turn": [], "just used": [], "came back": [], "after a restart": []}
    restored = {"ram": 0, "disk": 0}
    answers: list[str] = []
    session = open_()

    def turn(i: int, kind: str, question: str | None) -> None:
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
        answers.append("".join(text))
        talks[i] += [{"role": "assistant", "content": answers[-1]}]

    try:
        for i in range(opts.conversations):
            turn(i, "first turn", None)
            turn(i, "just used", QUESTIONS[1])
            log(f"{name}: conversation {i + 1}/{opts.conversations} opened")
        for i in range(opts.conversations):
            turn(i, "came back", QUESTIONS[2])
        rss = rss_bytes()
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
            "restored_tokens": restored, "rss_bytes": rss}, answers


def markdown(result: dict) -> list[str]:
    from omnidraft.measure.report import table

    o = result["options"]
    kinds = ("first turn", "just used", "came back", "after a restart")
    rows = []
    for name, row in result["rows"].items():
        t = row["first_token_s"]
        equal = f"{row['equal_to_read']}/{row['answers']}" if "answers" in row else "-"
        rows.append([name, *(t.get(k, "-") for k in kinds),
                     f"{t['came back'] / t['just used']:.2f}x" if t.get("just used") else "-",
                     f"{row['restored_tokens']['ram']} / {row['restored_tokens']['disk']}",
                     f"{row['rss_bytes'] / 1e9:.2f} GB", equal])
    return [result["question"], "",
            f"Drafter {o['drafter']}, target {o['target']}, {o['threads']} threads; {o['conversations']} conversations "
            f"each opened with a pasted module (~{MODULE_CHARS} characters), a follow-up at once, every one visited "
            f"again in turn, then the first {o['restarts']} after the Session was opened again; greedy, "
            f"{o['max_new_tokens']} tokens an answer; states: `--cache-ram {o['cache_ram_mib']}`. Median seconds to "
            "the first text.", "",
            *table(["row", "first turn (s)", "just used (s)", "came back (s)", "after a restart (s)",
                    "came back / just used", "prompt tokens restored, RAM / disk", "RSS after the visits",
                    "answers equal to read's"], rows)]


def _write(result: dict, out: str | Path, keep: bool) -> Path:
    from omnidraft.measure import report

    return report.write(out, "bench-switching", "omnidraft bench switching: conversations visited in turn",
                        result, markdown(result), keep=keep)
