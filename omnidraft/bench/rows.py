"""The rows a suite compares, behind one protocol (a Row runs one prompt and says what it took),
and the rows through ``Session``:

- ``product``: the pair through ``Session`` (the product as a user runs it: its cost model,
  copies from the context, the published adapter, or another adapter version / no copies for a
  side-by-side), never a hand-built pair;
- ``target_alone``: the target alone through ``Session`` on a given runtime (the same runtime as
  the product's: the first honest alternative).

The other engines' rows (llama.cpp, transformers) are in bench/baselines.py. Knows the Session;
nothing about interleaving or reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from omnidraft.measure.tally import Tally, figures
from omnidraft.pairs.settings import Runtime
from omnidraft.sampling import SamplingConfig

@dataclass(frozen=True)
class Prompt:
    """One prompt of a set: ``text`` through the chat template with ``chat``; ``sampling``:
    (temperature, top-p) of a sampled pass (None: greedy), ``seed`` its seed. A follow-up turn has
    its conversation's ``earlier`` user turns and the target's own greedy ``answers`` to them
    (bench/run.py fills those before any row runs)."""

    set: str
    text: str
    chat: bool
    seed: int = 0
    sampling: tuple[float, float] | None = None
    earlier: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()

    def messages(self) -> list[dict] | None:
        """The conversation up to this turn (None for a prompt without earlier turns)."""
        if not self.earlier:
            return None
        if len(self.answers) != len(self.earlier):
            raise ValueError(f"{len(self.earlier)} earlier turns but {len(self.answers)} answers (bench/run.py "
                             "answers them)")
        out = []
        for turn, answer in zip(self.earlier, self.answers):
            out += [{"role": "user", "content": turn}, {"role": "assistant", "content": answer}]
        return out + [{"role": "user", "content": self.text}]

    def answered(self, ask: Callable[["Prompt"], str]) -> "Prompt":
        """This prompt with its earlier turns answered by ``ask``, each asked as the last turn of the
        conversation so far (its own earlier answers included)."""
        answers: tuple[str, ...] = ()
        for i, turn in enumerate(self.earlier):
            answers += (ask(replace(self, text=turn, earlier=self.earlier[:i], answers=answers)),)
        return replace(self, answers=answers)

    def ids(self, tok) -> list[int]:
        """Its token ids for ``tok``: the conversation, or the text (through the template with ``chat``)."""
        from omnidraft.decode.text import encode_messages, encode_prompt

        messages = self.messages()
        return encode_messages(tok, messages) if messages else encode_prompt(tok, self.text, chat=self.chat)


@dataclass
class Run:
    """What a row's run on one prompt took: new tokens, wall seconds (prefill included), the new
    ids where the row reports them, and its decoding figures (measure/tally.py ``figures``; the
    target runtime a routed generation ran on)."""

    tokens: int
    seconds: float
    ids: list[int] | None = None
    figures: dict = field(default_factory=dict)

    def into(self, tally: Tally, equal: bool | None = None) -> None:
        """Fold this run into ``tally``: a row whose figures name no forwards did not count them."""
        tally.add(self.tokens, self.seconds, **{k: v for k, v in self.figures.items() if k != "runtime"},
                  equal=equal, counted="forwards" in self.figures)


class Row(Protocol):
    """``samples``: whether the row runs a prompt's sampled pass (others decode greedily and sit it out)."""

    name: str
    samples: bool

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run: ...


@dataclass(frozen=True)
class Missing:
    """A row a suite asked for that could not be built here, and why (an engine not installed, a
    server that did not start): the result says so rather than leaving it out silently."""

    name: str
    why: str


class SessionRow:
    """A row through a ``Session`` (each prompt a conversation of its own); ``memory``: how its
    generations use the Session's memory (Session.unlogged: read, recalling without being remembered)."""

    samples = True

    def __init__(self, name: str, session, memory: str = "off"):
        self.name, self.session, self.memory = name, session, memory

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run:
        self.session.new_conversation()  # unrelated prompts: none copies from another's answer
        sampling = None if prompt.sampling is None else SamplingConfig(*prompt.sampling, seed=prompt.seed)
        with self.session.unlogged(memory=self.memory):
            r = self.session.generate(prompt.messages() or prompt.text, chat=prompt.chat,
                                      max_new_tokens=max_new_tokens, sampling=sampling)
        m = r.metrics
        return Run(m["new_tokens"], m["wall_s"], list(r.token_ids), {**figures(m), "runtime": m.get("target_runtime")})

    def answer(self, prompt: Prompt, max_new_tokens: int) -> Prompt:
        """``prompt`` with its earlier turns answered greedily by this row, each in its conversation so far."""
        def ask(turn: Prompt) -> str:
            self.session.new_conversation()
            return self.session.generate(turn.messages() or turn.text, chat=True, max_new_tokens=max_new_tokens).text

        return prompt.answered(ask)


def product(drafter: str, target: str, runtime: Runtime = Runtime(cache_ram_mib=0), *, adapter: str = "latest",
            lookup: bool = True) -> SessionRow:
    """The pair through Session, unlogged and without the pair's memory (a measurement leaves no
    training record, and held-out prompts neither recall earlier answers nor are remembered);
    ``adapter`` and ``lookup`` as Session takes them (a row other than the defaults says so in its name)."""
    from omnidraft.session import Session

    name = "omnidraft pair" + ("" if adapter == "latest" else f", adapter {adapter}") + ("" if lookup else
                                                                                         ", no copies")
    return SessionRow(name, Session(drafter, target, log=False, memory=False, runtime=runtime, adapter=adapter,
                                    lookup=lookup))


class RememberedRow(SessionRow):
    """The pair recalling from a scratch memory (its own folder, never the pair's) that a stream of
    recurring work filled before anything was measured; ``state`` (once closed, its folder gone):
    the memory's size and lookup time."""

    def __init__(self, name: str, session, folder):
        super().__init__(name, session, memory="read")
        self.folder = folder
        self.state: dict | None = None  # once closed

    def close(self) -> None:
        import shutil

        from omnidraft.memory.summary import summarize

        memory = self.session.memories.space()
        self.state = {"memory": summarize(self.folder), "index_bytes": self.session.memories.rss_bytes,
                      "lookups": memory.finds, "lookup_ms_mean": round(1e3 * memory.find_s / max(memory.finds, 1), 4)}
        self.session.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def remembered(drafter: str, target: str, runtime: Runtime, stream: int, max_new_tokens: int,
               log: Callable[[str], None]) -> RememberedRow:
    """The pair (as ``product``) whose memory first takes in ``stream`` prompts of each kind of
    recurring work (omnidraft/recurring.py, interleaved by kind), each answered in a conversation
    of its own and remembered; then measured recalling from it without adding to it."""
    import tempfile
    import time
    from pathlib import Path

    from omnidraft.memory.config import MemoryConfig
    from omnidraft.memory.spaces import Memories
    from omnidraft.recurring import mixed
    from omnidraft.session import Session

    folder = Path(tempfile.mkdtemp(prefix="omnidraft-bench-memory-"))
    memories = Memories(folder, MemoryConfig(max_bytes=runtime.memory_mib << 20))
    session = Session(drafter, target, log=False, memory=memories, runtime=runtime)
    prompts = mixed(stream)
    t0 = time.perf_counter()
    for i, p in enumerate(prompts, 1):
        session.new_conversation()
        session.generate(p, chat=True, max_new_tokens=max_new_tokens)
        if i % 10 == 0 or i == len(prompts):
            log(f"the memory's stream: {i}/{len(prompts)} prompts answered and remembered "
                f"({time.perf_counter() - t0:.0f} s)")
    return RememberedRow(f"omnidraft pair, memory after {len(prompts)} prompts of use", session, folder)


class ReopenedRow(SessionRow):
    """The ``remembered`` row's pair recalling from its memory reopened from the file, as a restarted
    process would find it (a new ``Memories``: the index rebuilt from the SQLite file on first use),
    the models shared with that row (they hold nothing of the memory)."""

    def __init__(self, remembered: RememberedRow):
        from omnidraft.memory.spaces import Memories

        super().__init__(remembered.name + ", reopened as after a restart", remembered.session, memory="read")
        self.memories = Memories(remembered.folder, remembered.session.memories.cfg)
        self.state: dict | None = None  # once closed: its own index's size and lookups

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run:
        kept, self.session.memories = self.session.memories, self.memories
        try:
            return super().run(prompt, max_new_tokens)
        finally:
            self.session.memories = kept

    def close(self) -> None:
        memory = self.memories.space()
        self.state = {"index_bytes": self.memories.rss_bytes, "lookups": memory.finds,
                      "lookup_ms_mean": round(1e3 * memory.find_s / max(memory.finds, 1), 4)}
        self.memories.close()


def target_alone(target: str, runtime: Runtime) -> SessionRow:
    """The target alone through Session on ``runtime.target`` (the product's, for the same-runtime row),
    named by the runtime it loaded (``auto`` resolved)."""
    from omnidraft.session import Session

    session = Session(None, target, log=False, runtime=runtime)
    return SessionRow(f"target alone ({session.target_runtime})", session)
