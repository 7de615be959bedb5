"""The ``usage`` suite: does the pair get faster with use, as a user experiences it? (#20, #86)

A stream of prompts (HumanEval code problems, ShareGPT first turns and, with ``recurring``, the
recurring assistant work of omnidraft/recurring.py, the kinds taking turns) is generated through
``Session`` with the product's defaults (each answer logged for training and kept in the pair's
memory) while the real fine-tuning daemon (`omnidraft daemon run`, its own process) trains
beside it and publishes adapter versions the Session picks up between generations. The stream
runs in blocks of ``busy_block`` prompts with the daemon running and stopped in turn, so its cost
to a busy device is measured on the same stream (a guest: it must not slow generation). Every
``measure_every`` stream prompts, when a newer version exists, a fixed held-out set (prompts of
each kind never in the stream) is generated unlogged with the daemon frozen (SIGSTOP: the cores
are the Session's while it is timed). Before the stream, per held-out prompt with the rows
rotated (measure/interleave.py): the starting pair, the target alone on the same runtime,
llama.cpp alone and transformers' assisted generation (``rows``). After it, once the daemon has
trained on everything, interleaved per prompt: the cold pair (the starting adapter, no memory,
its Session made before the stream), memory only (the starting adapter recalling from the
memory the stream filled, its cost model as the stream left it), the last version (the daemon only), the last version with the memory
(use as a user meets it) and the target alone.

It runs in a scratch home (``<home>/usage-runs/<stamp>``) whose models, programs and
vocabularies are the real home's, so the pair starts where `omnidraft pair` leaves a fresh home.
Rows of the result: each measurement by a stable name (the history compares them run to run);
the curve over stream prompts is ``measurements``.

Knows Session, the daemon's start/stop/status and the bench rows; the report is usage_report.py's.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

from omnidraft.errors import OmniDraftError
from omnidraft.pairs.spec import DEFAULT_DRAFTER

QUESTION = "Does the pair get faster with use, as a user experiences it (the real daemon training beside it)?"
BASELINES = ("llamacpp", "assisted")
POLL_S = 2.0  # the daemon's poll period here: a run of hours should not wait 10 s per look


@dataclass(frozen=True)
class UsageOptions:
    """``code`` / ``chat``: stream prompts of each kind; ``recurring``: stream prompts of each
    recurring kind (tests, extract, reply; 0: none); ``held``: held-out prompts of each kind (the
    last HumanEval problems, ShareGPT turns after the stream's, and with ``recurring`` the recurring
    kinds' held-out ones; code and chat the control where the stream has none); ``busy_block``:
    stream prompts between starting and stopping the daemon (its cost to a busy stream, measured);
    ``stream_tokens`` /
    ``max_new_tokens``: new tokens per stream / held-out prompt; ``k``: a fixed draft length (None:
    the cost model's); ``daemon_config``: a JSON file of the daemon's RoundConfig; ``rows``: the
    baselines beside the pair and the target alone (BASELINES)."""

    drafter: str = DEFAULT_DRAFTER
    target: str = "qwen2.5-coder-1.5b"
    code: int = 150
    chat: int = 150
    recurring: int = 0
    held: int = 12
    busy_block: int = 10
    stream_tokens: int = 48
    max_new_tokens: int = 64
    threads: int = 2
    dtype: str = "bf16"
    k: int | None = None
    measure_every: int = 50
    daemon_config: str | None = None
    drain_minutes: float = 20.0
    calibration_s: float = 60.0
    rows: tuple[str, ...] = BASELINES

    def __post_init__(self):
        for name in ("code", "chat", "recurring", "held"):
            if getattr(self, name) < 0:
                label = "recurring (--stream)" if name == "recurring" else name
                raise OmniDraftError(f"{label} must be >= 0, got {getattr(self, name)}")
        if self.code + self.chat + self.recurring == 0 or self.held == 0:
            raise OmniDraftError("usage needs stream prompts and held-out prompts",
                                 "--code/--chat/--stream and --held >= 1")
        for name in ("stream_tokens", "max_new_tokens", "threads", "measure_every", "busy_block"):
            if getattr(self, name) < 1:
                raise OmniDraftError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.dtype not in ("fp32", "bf16"):
            raise OmniDraftError(f"dtype must be fp32 or bf16, got {self.dtype!r}")
        bad = [r for r in self.rows if r not in BASELINES]
        if bad:
            raise OmniDraftError(f"no usage row {bad[0]!r}", f"the baselines are {', '.join(BASELINES)} (the pair and "
                                 "the target alone always run)")
        if self.daemon_config is not None and not Path(self.daemon_config).is_file():
            raise OmniDraftError(f"no daemon config {self.daemon_config}", "a JSON file of RoundConfig fields")

    def as_json(self) -> dict:
        return {**asdict(self), "rows": list(self.rows)}


@contextmanager
def at_home(path: Path) -> Iterator[Path]:
    """$OMNIDRAFT_HOME is ``path`` (this process and the daemon it starts) for the duration."""
    before = os.environ.get("OMNIDRAFT_HOME")
    os.environ["OMNIDRAFT_HOME"] = str(path)
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("OMNIDRAFT_HOME", None)
        else:
            os.environ["OMNIDRAFT_HOME"] = before


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """The daemon process stopped (SIGSTOP) for the duration: a timing gets the cores alone. Never
    stopped inside its probe of the generating lock (an instant's exclusive hold that would keep
    every generation waiting): if it holds it, it runs on a moment and is stopped again."""
    from omnidraft.generating import free

    while True:
        os.kill(pid, signal.SIGSTOP)
        while _state(pid) not in ("T", "t", None):
            time.sleep(0.001)
        if free():
            break
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _state(pid: int) -> str | None:
    """The process's state letter (/proc; None: gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def drained(daemon, spec, cfg, timeout_s: float, log: Callable[[str], None]) -> bool:
    """Until the daemon is idle with no round due for ``spec`` (``tuning.due``, what the idle daemon
    polls, with its ``cfg``): False at ``timeout_s`` or if it stopped."""
    from omnidraft.pairs.spec import adapter_store, log_path
    from omnidraft.train.tuning import due
    from omnidraft.train.verlog import VerificationLog

    records, store = VerificationLog(log_path()), adapter_store()
    deadline = time.time() + timeout_s
    try:
        while time.time() < deadline:
            st = daemon.status()
            if not st.get("running"):
                log("the daemon is not running")
                return False
            if st.get("state") == "idle" and not due(spec, records, store, cfg):
                return True
            time.sleep(0.5)
    finally:
        records.close()
    return False


def side_by_side(session, prompts: list[tuple[str, str, bool]], max_new_tokens: int, others: list
                 ) -> dict[str, dict]:
    """Per prompt ((kind, text, chat)), the rows' order rotated: the session's pair (unlogged, as
    row "pair"; None: only ``others``) and each of ``others`` (bench rows) on the same prompt.
    {row name: {kind / "all": figures}}: tokens/s, target forwards per generated token (None where
    a row does not count them), the drafter's acceptance (None without drafts)."""
    from omnidraft.bench.rows import Prompt, SessionRow
    from omnidraft.measure.interleave import interleaved
    from omnidraft.measure.tally import Tally

    asked = [Prompt(kind, text, chat) for kind, text, chat in prompts]
    tallies: dict[tuple[str, str], Tally] = {}
    rows = ([SessionRow("pair", session)] if session is not None else []) + list(others)
    routes: dict[str, dict[str, int]] = {}  # row -> target runtime -> generations (a routed pair's)
    for _, prompt, row, got in interleaved(asked, rows, lambda row, p: row.run(p, max_new_tokens)):
        for kind in (prompt.set, "all"):  # a Session row's generations are unlogged (SessionRow.run)
            got.into(tallies.setdefault((row.name, kind), Tally()))
        if got.figures.get("runtime"):
            counts = routes.setdefault(row.name, {})
            counts[got.figures["runtime"]] = counts.get(got.figures["runtime"], 0) + 1
    out: dict[str, dict] = {}
    for (name, kind), t in tallies.items():
        acc, per_forward = t.acceptance(), t.tokens_per_forward()
        out.setdefault(name, {})[kind] = {
            "tokens_per_s": round(t.tokens_per_s(), 3), "tokens": t.tokens,
            "forwards_per_token": round(t.forwards / t.tokens, 4) if per_forward is not None and t.tokens else None,
            "acceptance": None if acc is None else round(acc, 4),
            **({"runtimes": routes[name]} if kind == "all" and name in routes else {})}
    return out


def _prompts(opts: UsageOptions) -> tuple[list[tuple[str, str, bool]], list[tuple[str, str, bool]]]:
    """(the stream, the kinds taking turns; the held-out set), each prompt as (kind, text, whether
    it is a chat)."""
    from omnidraft.prompts import humaneval, sharegpt
    from omnidraft.recurring import KINDS, recurring

    code_all = humaneval()
    if opts.code + opts.held > len(code_all):
        raise OmniDraftError(f"code + held must be <= {len(code_all)} HumanEval problems, got {opts.code + opts.held}")
    chats = sharegpt(opts.chat + opts.held)
    kinds = [("code", code_all[: opts.code], code_all[len(code_all) - opts.held:], False),
             ("chat", chats[: opts.chat], chats[opts.chat:], True)]
    if opts.recurring:
        kinds += [(kind, recurring(kind, opts.recurring), recurring(kind, opts.held, held=True), True)
                  for kind in KINDS]
    stream = [(kind, texts[i], chat) for i in range(max(len(texts) for _, texts, _, _ in kinds))
              for kind, texts, _, chat in kinds if i < len(texts)]
    held = [(kind, text, chat) for kind, _, texts, chat in kinds for text in texts]  # code and chat: the control
    return stream, held


def run_usage(opts: UsageOptions, *, out: str | Path = "bench/results", keep: bool = True,
              log: Callable[[str], None] = lambda s: None, root: Path | None = None) -> dict:
    """Run the suite (in the scratch home ``root``; default <home>/usage-runs/<stamp>); returns the
    result, also written under ``out``."""
    from omnidraft.bench.usage_report import write
    from omnidraft.device.threads import set_threads
    from omnidraft.home import home, scratch_home
    from omnidraft.measure.stamp import stamp

    set_threads(opts.threads)
    stamped = stamp("usage", opts.threads, question=QUESTION, options=opts.as_json())
    stream, held = _prompts(opts)
    root = scratch_home(root or home() / "usage-runs" / time.strftime("%Y%m%d-%H%M%S"))
    log(f"scratch home {root}")
    with at_home(root):
        result = {**stamped, **_measure(opts, stream, held, log)}
    write(result, out, keep, log)
    return result


def _measure(opts: UsageOptions, stream: list, held: list, log) -> dict:
    from omnidraft.session import Session
    from omnidraft.bench.baselines import AssistedRow, LlamaCppRow
    from omnidraft.bench.rows import SessionRow, target_alone
    from omnidraft.jobs.pairing import format_report, pair
    from omnidraft.memory.summary import summarize
    from omnidraft.models.budget import status as process_status
    from omnidraft.pairs.settings import Runtime
    from omnidraft.train import daemon
    from omnidraft.train.tuning import history

    # the product's (both pairs route alike), but no saved states: a row would restore another's (or an earlier
    # run's) state of the same held-out prompt (bench/switching.py measures them)
    runtime = Runtime(dtype=opts.dtype, threads=opts.threads, cache_ram_mib=0)
    session = Session(opts.drafter, opts.target, k=opts.k, runtime=runtime)
    cfg = daemon.load_config(opts.daemon_config)  # a bad config is an error before the stream, not in the daemon
    paired = pair(opts.target, opts.drafter, session=session, calibration_s=opts.calibration_s)  # the user's first step
    log(format_report(paired))
    got = {"drafter_runtime": session.drafter_runtime, "target_runtime": session.target_runtime,
           "stream_prompts": len(stream), "held_prompts": len(held), "pairing": paired, "measurements": [],
           "stream_log": []}

    def record(label: str, seen: int, numbers: dict) -> None:
        got["measurements"].append({"label": label, "prompts_seen": seen, "version": session.version, **numbers})
        log(f"{label}: {numbers['all']['tokens_per_s']} tokens/s after {seen} stream prompts")

    alone = target_alone(opts.target, Runtime(target=session.target_runtime, dtype=opts.dtype, threads=opts.threads,
                                              cache_ram_mib=0))
    others = [r for r in (LlamaCppRow.make(opts.target, opts.threads, log) if "llamacpp" in opts.rows else None,
                          AssistedRow(opts.target, opts.drafter) if "assisted" in opts.rows else None) if r is not None]
    before = side_by_side(session, held, opts.max_new_tokens, [alone, *others])
    rows = {"starting pair": before["pair"], "target alone (before)": before[alone.name],
            **{r.name: before[r.name] for r in others}}
    record("starting pair", 0, before["pair"])
    del others  # the baselines' models leave memory before the daemon trains
    measured = first = session.version  # the adapter pairing started from
    # the cold pair for the end: the starting adapter, its cost model as pairing left it (made now)
    start = Session(opts.drafter, opts.target, k=opts.k, log=False, adapter=first or "none", runtime=runtime)
    busy = Busy(opts, log)
    t0 = time.perf_counter()
    try:
        for n, (kind, prompt, is_chat) in enumerate(stream, 1):
            on = busy.block(n)
            m = session.generate(prompt, max_new_tokens=opts.stream_tokens, chat=is_chat).metrics
            busy.took(on, m["new_tokens"], m["wall_s"])
            got["stream_log"].append({"n": n, "kind": kind, "daemon": on, "version": session.version,
                                      "tokens_per_s": m["tokens_per_s"], "acceptance": m["acceptance_rate"]})
            if n % opts.measure_every == 0 or n == len(stream):
                log(f"{n}/{len(stream)} stream prompts, adapter {session.version}, {time.perf_counter() - t0:.0f} s")
                if session.refresh() is not None and session.version != measured:
                    with busy.frozen():
                        record(f"version {session.version}", n,
                               side_by_side(session, held, opts.max_new_tokens, [])["pair"])
                    measured = session.version
        log("stream done; waiting for the daemon to train on the rest")
        busy.block(0)
        got["drained"] = drained(daemon, session.spec, cfg, opts.drain_minutes * 60, log)
    finally:
        daemon.stop()
    got["stream_seconds"] = round(time.perf_counter() - t0, 1)
    got["busy_stream"] = busy.summary()
    log(f"the stream with the daemon running: {got['busy_stream']['ratio']}x its tokens/s with it stopped")
    session.refresh()
    # memory only: the starting adapter, its cost model as the stream left it (what it learnt of recalls)
    recalling = Session(opts.drafter, opts.target, k=opts.k, log=False, adapter=first or "none", runtime=runtime)
    final = [SessionRow("cold pair", start), SessionRow("memory only", recalling, memory="read"),
             SessionRow("last version", session), SessionRow("last version + memory", session, memory="read"), alone]
    after = side_by_side(None, held, opts.max_new_tokens, final)
    if session.version is not None and session.version != measured:
        record(f"final {session.version}", len(stream), after["last version"])
    rows.update({name: after[name] for name in ("cold pair", "memory only", "last version", "last version + memory")})
    rows["target alone (after)"] = after[alone.name]
    got["kinds"] = list(dict.fromkeys(kind for kind, _, _ in held))
    got["rows"] = {name: {**figures["all"], **{k: figures[k] for k in got["kinds"] if k in figures}}
                   for name, figures in rows.items()}
    got["last_version"] = session.version
    got["rounds"] = history(session.spec)
    got["memory"] = {**(summarize(session.memories.folder) or {}), "index_bytes": session.memories.rss_bytes} \
        if session.memories is not None else None
    got["peak_rss_bytes"] = process_status(os.getpid()).get("VmHWM")  # this process: every row's models at once
    cold, alone_after = after["cold pair"], after[alone.name]
    got["summary"] = {
        name: {kind: {"vs_cold_pair": round(after[name][kind]["tokens_per_s"] / cold[kind]["tokens_per_s"], 3),
                      "forwards_change": _change(after[name][kind]["forwards_per_token"],
                                                 cold[kind]["forwards_per_token"]),
                      "vs_target_alone": round(after[name][kind]["tokens_per_s"]
                                               / alone_after[kind]["tokens_per_s"], 3)}
               for kind in [*got["kinds"], "all"]}
        for name in ("memory only", "last version", "last version + memory")}
    for s in (session, start, recalling):
        s.close()
    alone.session.close()
    return got


class Busy:
    """The daemon over the stream: blocks of ``busy_block`` prompts with it running and stopped,
    in ABBA order (running, stopped, stopped, running, ...: a trend over the stream, as the memory
    fills, weighs on both alike), so its cost to a busy device is the stream's tokens/s while it
    runs against while it does not, the same prompts' kinds in both; running after the stream
    until drained. It starts as under a busy stream: the seconds it takes to start are not an idle
    gap it may train in (a generation is held meanwhile)."""

    def __init__(self, opts: UsageOptions, log: Callable[[str], None]):
        self.opts, self.log = opts, log
        self.pid: int | None = None
        self.tally = {True: [0, 0.0], False: [0, 0.0]}  # daemon running -> (new tokens, seconds)

    def block(self, n: int) -> bool:
        """Whether the daemon runs for stream prompt ``n`` (1-based; 0: after the stream, it does),
        started or stopped here."""
        from omnidraft.generating import generating
        from omnidraft.train import daemon

        on = n == 0 or (n - 1) // self.opts.busy_block % 4 in (0, 3)
        if on and self.pid is None:
            with generating():  # a stream in flight: its start-up (imports) is no idle gap to train in
                self.pid = daemon.start(POLL_S, config=self.opts.daemon_config)
                ready = time.time() + 120
                while time.time() < ready and not daemon.started(self.pid):
                    time.sleep(0.2)
        elif not on and self.pid is not None:
            daemon.stop()
            self.pid = None
        else:
            return on
        self.log(f"stream prompt {n}: the daemon {'running' if on else 'stopped'}" if n else "the daemon running")
        return on

    def took(self, on: bool, tokens: int, seconds: float) -> None:
        self.tally[on][0] += tokens
        self.tally[on][1] += seconds

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """The daemon, if running, stopped (SIGSTOP) for the duration: a timing gets the cores alone."""
        if self.pid is None:
            yield
            return
        with frozen(self.pid):
            yield

    def summary(self) -> dict:
        speed = {on: round(t / s, 3) if s else None for on, (t, s) in self.tally.items()}
        return {"daemon_running": speed[True], "daemon_stopped": speed[False],
                "ratio": round(speed[True] / speed[False], 3) if speed[True] and speed[False] else None,
                "tokens": {"running": self.tally[True][0], "stopped": self.tally[False][0]}}


def _change(now: float | None, then: float | None) -> float | None:
    return None if not now or not then else round(now / then - 1, 4)
