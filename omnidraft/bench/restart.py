"""The ``restart`` row of `omnidraft bench switching`: a long conversation on `omnidraft serve`,
the server killed (SIGKILL) and started again, and a follow-up. Does the conversation come back
from its saved state as fast as a follow-up in a server that never stopped, and is the answer
still the target's own?

The conversation opens with pasted modules (bench/switching.py ``modules``, as many as make at
least ``restart_tokens`` target tokens) and a question; a follow-up comes at once (``warm``: the
server's caches hold it), KILL_AFTER_S later the server is killed with SIGKILL and started again
on the same state folder (a scratch one; the same API key, whose conversations they are), and a
second follow-up comes (``after kill -9``). Each turn is one streamed chat completion through
the ``openai`` SDK (greedy). The server runs as `omnidraft serve` does by
default (saved states on), but with no training, log or memory (bench/servers.py). The last
answer is compared with the target alone's greedy answer to the same messages on the runtime the
server reports (a Session in this process, no saved states: a fresh read).

Knows the server row, the SDK and Session; nothing about how states are kept.
"""

from __future__ import annotations

import secrets
import tempfile
import time
from typing import Callable

from omnidraft.bench.rows import Prompt

KILL_AFTER_S = 2.0  # after the warm answer: its state's file written (a writer thread's ~0.1 s; one killed sooner
# loses that file only, and the follow-up restores the turn before and reads the rest)
QUESTIONS = ("What does the first module do? Two sentences.", "Name one function in the second module.",
             "Which of these modules would you test first?")


def run_restart(opts, modules: Callable[[int], list[str]], log: Callable[[str], None]) -> dict:
    """``opts``: SwitchingOptions (drafter, target, threads, max_new_tokens, restart_tokens)."""
    from omnidraft.bench.servers import omnidraft_serve
    from omnidraft.decode.text import encode_messages
    from omnidraft.models.loading import load_tokenizer

    tok = load_tokenizer(opts.target)
    pasted = _pasted(modules, tok, opts.restart_tokens)
    turns = [f"{pasted}\n{QUESTIONS[0]}", QUESTIONS[1], QUESTIONS[2]]
    answers: list[str] = []
    first: dict[str, float] = {}
    runtimes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="omnidraft-states-") as folder:
        extra, key = ["--state-dir", folder], secrets.token_hex(16)  # the client's key the same after the restart
        server = omnidraft_serve(opts.drafter, opts.target, tok, log, threads=opts.threads, dtype="bf16", extra=extra,
                                 key=key)
        try:
            for kind, i in (("first turn", 0), ("warm", 1)):
                _turn(server, turns, answers, i, opts.max_new_tokens, first, kind, runtimes)
            log(f"restart: {len(tok(turns[0]).input_ids)}-token opening answered; kill -9 in {KILL_AFTER_S:g} s")
            time.sleep(KILL_AFTER_S)
            server.proc.kill()
            server.proc.wait()
        finally:
            server.close()
        server = omnidraft_serve(opts.drafter, opts.target, tok, log, threads=opts.threads, dtype="bf16", extra=extra,
                                 key=key)
        try:
            _turn(server, turns, answers, 2, opts.max_new_tokens, first, "after kill -9", runtimes)
        finally:
            server.close()
    alone = _target_alone(opts, _messages(turns, answers, 2), runtimes[-1])
    return {"first_token_s": {k: round(v, 3) for k, v in first.items()},
            "conversation_tokens": len(encode_messages(tok, _messages(turns, answers, 2))),
            "runtimes": runtimes, "equal_to_target_alone": answers[2] == alone}


def _pasted(modules: Callable[[int], list[str]], tok, tokens: int) -> str:
    """Modules, fenced, until they make at least ``tokens`` target tokens."""
    n = 1
    while True:
        text = "\n".join(f"```python\n{m}\n```" for m in modules(n))
        if len(tok(text).input_ids) >= tokens:
            return text
        n += 1


def _messages(turns: list[str], answers: list[str], i: int) -> list[dict]:
    """Turn ``i``'s conversation: the earlier turns with their answers, then turn ``i``."""
    out = []
    for turn, answer in zip(turns[:i], answers):
        out += [{"role": "user", "content": turn}, {"role": "assistant", "content": answer}]
    return out + [{"role": "user", "content": turns[i]}]


def _turn(server, turns, answers, i, max_new_tokens, first, kind, runtimes) -> None:
    prompt = Prompt("restart", turns[i], chat=True, earlier=tuple(turns[:i]), answers=tuple(answers))
    text, run = server.ask(prompt, max_new_tokens)
    answers.append(text)
    first[kind] = run.figures["first_token_s"]
    runtimes.append(run.figures.get("runtime", "?"))


def _target_alone(opts, messages: list[dict], runtime: str) -> str:
    """The target alone's greedy answer to ``messages`` on ``runtime``, read afresh."""
    from omnidraft.pairs.settings import Runtime
    from omnidraft.session import Session

    session = Session(None, opts.target, runtime=Runtime(target=runtime, threads=opts.threads, cache_ram_mib=0),
                      log=False, memory=False)
    try:
        return "".join(p.text for p in session.pieces(messages, max_new_tokens=opts.max_new_tokens))
    finally:
        session.close()
