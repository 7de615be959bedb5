"""Generation front door: encode the prompt, run one decoding strategy, stream the text.

Knows how strategies are called and how text is streamed; the decode loops live in
decode/autoregressive.py and decode/loop.py, the strategies' proposers in propose/. decode/
imports propose/ in this direction only: the loop consumes proposers through the ``Proposer``
protocol and this front door builds one from a ``SpecConfig``; proposers know nothing of the loop
(the sampler both use is omnidraft/sampling.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator, TypeVar

import torch

from omnidraft.decode.autoregressive import decode_ar
from omnidraft.decode.draft_length import DraftLength
from omnidraft.decode.loop import Round, decode
from omnidraft.decode.metrics import Metrics
from omnidraft.decode.modes import is_lossless
from omnidraft.decode.ownership import own
from omnidraft.decode.target import Target
from omnidraft.decode.text import Detokenizer, StopText, drained, encode_prompt, stop_ids
from omnidraft.errors import ContextFull, OmniDraftError
from omnidraft.memory.spaces import Recalls
from omnidraft.models.lm import LM
from omnidraft.propose.config import SpecConfig
from omnidraft.propose.lookup import ContextIndex, LookupConfig
from omnidraft.propose.registry import get
from omnidraft.translate.reverse import DraftContext

T = TypeVar("T")


@dataclass(frozen=True)
class Verified:
    """What one generation's verifications teach the drafter, as decoding saw it (train/records.py
    turns it into a training record): the drafter's ids of the prompt and of the generated text
    (its complete-UTF-8 prefix; ``tail``: the bytes it held back), the target's new ids, and the
    target's top-k ids and probabilities at each of them."""

    draft_prompt: list[int]
    draft_gen: list[int]
    tail: bytes
    target_gen: list[int]
    top_ids: torch.Tensor  # [len(target_gen), K]
    top_probs: torch.Tensor  # [len(target_gen), K]


@dataclass
class Result:
    text: str
    token_ids: list[int]  # the target's new tokens
    metrics: dict = field(default_factory=dict)  # Metrics.summary() + verify mode and lossless
    raw: Metrics | None = None  # the counters and per-step timings behind the summary
    verified: Verified | None = None  # for a training record, when asked for (record_topk > 0)
    finish_reason: str = "length"  # "stop": an end-of-sequence id (or a stop string) ended it; "length": the budget

    @property
    def lossless(self) -> bool:
        """True when the output is distributed exactly as the target's own (modes.py)."""
        return bool(self.metrics.get("lossless", True))


SOURCES = ("drafted", "copied", "remembered", "target")
COPIED = {"lookup": "copied", "memory": "remembered"}  # a round's kind (decode/loop.py) -> its proposal's source


@dataclass(frozen=True)
class Piece:
    """Text that decoding committed, with where its tokens came from: ``drafted`` (the drafter's
    proposal, accepted by the target), ``copied`` (a continuation copied from the context,
    accepted), ``remembered`` (a continuation recalled from the pair's memory of earlier answers,
    accepted) or ``target`` (the target's own: the correction or bonus token of a round, or a token
    it decoded alone). A character split across tokens comes out with the piece that completes it."""

    text: str
    source: str
    tokens: int  # target tokens behind this piece


def as_pieces(text_pieces: Generator[str, None, T], source: str = "target") -> Generator[Piece, None, T]:
    """Text pieces as Pieces of one source; returns what ``text_pieces`` returns."""
    try:
        while True:
            yield Piece(next(text_pieces), source, 0)
    except StopIteration as done:
        return done.value
    finally:
        text_pieces.close()


def texts(pieces: Generator[Piece, None, T]) -> Generator[str, None, T]:
    """The text of each piece; returns what ``pieces`` returns. Closed early, it closes ``pieces``."""
    try:
        while True:
            yield next(pieces).text
    except StopIteration as done:
        return done.value
    finally:
        pieces.close()


def check_budget(prompt_ids: list[int], max_new_tokens: int | None, model, *, strict: bool = False) -> int:
    """max_new_tokens clipped to the context window (None: to its end); an error if the prompt
    alone overflows it, or with ``strict`` if the prompt and max_new_tokens together do."""
    if max_new_tokens is not None and max_new_tokens < 1:
        raise OmniDraftError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    room = model.max_length - len(prompt_ids)
    name = getattr(model, "name", "the target")
    if room < 1:
        raise ContextFull(
            f"prompt is {len(prompt_ids)} tokens, longer than {name}'s context window of {model.max_length}",
            "shorten the prompt")
    if strict and max_new_tokens is not None and max_new_tokens > room:
        raise ContextFull(
            f"the prompt's {len(prompt_ids)} tokens and {max_new_tokens} new tokens pass {name}'s context window "
            f"of {model.max_length}", f"ask for at most {room} new tokens, or shorten the prompt")
    return room if max_new_tokens is None else min(max_new_tokens, room)


def stream(chunks: Iterator[tuple[list[int], str]], detok: Detokenizer, sink: list[int], shown: list[str],
           stops: StopText | None = None) -> Generator[Piece, None, bool]:
    """Pieces from chunks of (new token ids, their source); every id is appended to ``sink`` and
    every piece's text to ``shown``. Returns True where one of ``stops`` ended the text."""
    held, source = 0, "target"  # tokens whose text the detokenizer (or a possible stop string) holds back
    for ids, source in chunks:
        if not ids:
            continue
        sink.extend(ids)
        text, hit, held = detok.push(ids), False, held + len(ids)
        if stops is not None:
            text, hit = stops.push(text)
        if text:
            shown.append(text)
            yield Piece(text, source, held)
            held = 0
        if hit:
            return True
    rest = stops.flush() if stops is not None else ""
    if rest:
        shown.append(rest)
        yield Piece(rest, source, held)
    return False


def _finish(ids: list[int], stop: set[int], stopped: bool) -> str:
    """``stop``: an end-of-sequence id or a stop string ended the generation; ``length``: its budget."""
    return "stop" if stopped or (ids and ids[-1] in stop) else "length"


def stream_ar(target: Target, tok, prompt_ids: list[int], *, max_new_tokens: int) -> Generator[str, None, Result]:
    """The target decoding alone (strategy `ar`) as a generator of text pieces; returns the Result."""
    return texts(pieces_ar(target, tok, prompt_ids, budget=check_budget(prompt_ids, max_new_tokens, target)))


def pieces_ar(target: Target, tok, prompt_ids: list[int], *, budget: int,
              stops: StopText | None = None) -> Generator[Piece, None, Result]:
    """``stream_ar`` as Pieces (every token the target's own), ``budget`` new tokens at most (checked
    against the window by the caller: ``check_budget``), ended early where one of ``stops`` appears
    in the text."""
    metrics = Metrics("ar")
    ids: list[int] = []
    shown: list[str] = []
    with own(target, "target") as tgt:
        stop = stop_ids(tok, tgt.eos_ids)
        chunks = decode_ar(tgt, prompt_ids, max_new_tokens=budget, stop=stop, metrics=metrics)
        try:
            stopped = yield from stream(((c, "target") for c in chunks), Detokenizer(tok, prompt_ids), ids, shown,
                                        stops)
        finally:
            chunks.close()
    text = "".join(shown) if stopped else tok.decode(ids, skip_special_tokens=True)
    summary = {**metrics.summary(), "verify": None, "lossless": True}
    return Result(text=text, token_ids=ids, metrics=summary, raw=metrics, finish_reason=_finish(ids, stop, stopped))


def pieces_engine(engine, tok, prompt_ids: list[int], *, max_new_tokens: int) -> Generator[Piece, None, Result]:
    """A serving engine generating on its own (``engine.stream_alone``: one streamed request): its
    own output of the served target, so exact; nothing verified, so no training record.
    ``metrics["engine"]`` names what produced it."""
    alone = yield from as_pieces(engine.stream_alone(prompt_ids, max_new_tokens))
    m = Metrics("engine", new_tokens=alone.tokens, target_forwards=alone.tokens, wall_s=alone.seconds)
    return Result(alone.text, tok(alone.text, add_special_tokens=False).input_ids,
                  {**m.summary(), "verify": None, "lossless": True, "engine": engine.describe()}, m,
                  finish_reason="length" if alone.tokens >= max_new_tokens else "stop")


def generate_ar(target: Target, tok, prompt: str, *, max_new_tokens: int = 128, chat: bool = False,
                on_text: Callable[[str], None] | None = None) -> Result:
    """Plain autoregressive generation with the target alone (strategy `ar`), sampled with the
    target's settings: the reference every speculative run is compared with."""
    return drained(stream_ar(target, tok, encode_prompt(tok, prompt, chat=chat), max_new_tokens=max_new_tokens),
                   on_text)


def generate_speculative(drafter: LM, target: Target, pair, prompt: str, *, cfg: SpecConfig, k: DraftLength,
                         max_new_tokens: int = 128, chat: bool = False,
                         on_text: Callable[[str], None] | None = None, record_topk: int = 0,
                         head=None, on_round: Callable[[Round], None] | None = None,
                         lookup: LookupConfig | None = None, earlier: list[int] | None = None,
                         memory: Recalls | None = None) -> Result:
    """Speculative generation with ``cfg.strategy`` (`ar` delegates to generate_ar); see
    stream_speculative. ``on_text`` sees each text piece."""
    if not get(cfg.strategy).speculative:
        return generate_ar(target, pair.target_tok, prompt, max_new_tokens=max_new_tokens, chat=chat, on_text=on_text)
    pieces = stream_speculative(drafter, target, pair, prompt, cfg=cfg, k=k, max_new_tokens=max_new_tokens,
                                chat=chat, record_topk=record_topk, head=head, on_round=on_round, lookup=lookup,
                                earlier=earlier, memory=memory)
    return drained(pieces, on_text)


def stream_speculative(drafter: LM, target: Target, pair, prompt: str, *, cfg: SpecConfig, k: DraftLength,
                       max_new_tokens: int = 128, chat: bool = False, record_topk: int = 0,
                       head=None, on_round: Callable[[Round], None] | None = None, lookup: LookupConfig | None = None,
                       earlier: list[int] | None = None, memory: Recalls | None = None) -> Generator[str, None, Result]:
    """Speculative generation as a generator: yields text pieces as rounds commit tokens and
    returns the Result (``result = yield from stream_speculative(...)``).

    ``target``: any Target (decode/target.py: a LocalTarget over an in-process model, a remote
    one); the drafter samples with the target's sampling settings and the target verifies in its
    own mode (decode/modes.py says whether that is lossless). ``k``: how many tokens each round
    drafts (``FixedK``, or a ``CostModelK`` choosing by the cost model, 0 when the target alone is
    faster). ``record_topk`` > 0 also builds the training record. ``head``: the pair's
    AcceptanceHead, used when ``cfg.gamma`` is set (adaptive drafting). ``on_round``: called
    with every round as it commits (e.g. decode/rejections.py). ``lookup``: also propose ids
    copied from the context (propose/lookup.py) where ``k``'s cost model prefers them;
    ``earlier``: target ids of earlier turns to copy from too; ``memory``: the pair's memory of
    earlier answers to recall from (memory/spaces.py).

    Each call runs on its own state: in-process models that can fork are forked (own KV cache,
    shared weights); a drafter program or a target in use by another generation is an error."""
    target_ids = encode_prompt(pair.target_tok, prompt, chat=chat)
    return texts(pieces_speculative(drafter, target, pair, target_ids, encode_prompt(pair.draft_tok, prompt, chat=chat),
                                    cfg=cfg, k=k, budget=check_budget(target_ids, max_new_tokens, target),
                                    record_topk=record_topk, head=head,
                                    on_round=on_round, lookup=lookup, earlier=earlier, memory=memory))


def pieces_speculative(drafter: LM, target: Target, pair, target_ids: list[int], draft_ids: list[int], *,
                       cfg: SpecConfig, k: DraftLength, budget: int, record_topk: int = 0,
                       head=None, on_round: Callable[[Round], None] | None = None,
                       lookup: LookupConfig | None = None, earlier: list[int] | None = None,
                       memory: Recalls | None = None, stops: StopText | None = None) -> Generator[Piece, None, Result]:
    """``stream_speculative`` over a prompt already encoded for both models (``target_ids``,
    ``draft_ids``: the same text in each vocabulary), ``budget`` target tokens at most (checked
    against the window by the caller: ``check_budget``), as Pieces: each round's accepted proposal
    (drafted, copied or remembered) and then its correction or bonus token (the target's own).
    ``memory``: the pair's memory to recall continuations from (memory/spaces.py; it learns which
    entries helped; remembering the answer is the caller's). Ends early where one of ``stops``
    appears in the text (the round that made it is the last)."""
    sampling, mode = target.sampling, target.mode
    lossless = is_lossless(cfg.strategy, mode, sampling)
    metrics = Metrics(cfg.strategy)
    ids: list[int] = []
    shown: list[str] = []
    rows: list[tuple[torch.Tensor, torch.Tensor]] = []
    with own(drafter, "drafter") as dlm, own(target, "target") as verifier:
        proposer = get(cfg.strategy).proposer(pair, dlm, sampling, cfg, head)
        ctx = DraftContext(pair.draft_tok, pair.vmap, draft_ids)
        stop = stop_ids(pair.target_tok, verifier.eos_ids)
        rounds = decode(proposer, verifier, ctx, target_ids, k=k, max_new_tokens=budget, stop=stop,
                        record_topk=record_topk, memory=memory,
                        lookup=None if lookup is None else ContextIndex(lookup, earlier))

        def committed() -> Iterator[tuple[list[int], str]]:  # each round folded into metrics and record rows
            for rnd in rounds:
                metrics.add(rnd)
                if on_round:
                    on_round(rnd)
                if record_topk and rnd.rows is not None:
                    rows.append(rnd.rows)
                kept = min(rnd.verdict.accepted, len(rnd.committed))  # the proposal's, then the target's own
                yield rnd.committed[:kept], COPIED.get(rnd.kind, "drafted")
                yield rnd.committed[kept:], "target"

        try:
            stopped = yield from stream(committed(), Detokenizer(pair.target_tok, target_ids), ids, shown, stops)
        finally:  # the loop's end (the drafter's context made whole) runs now, also when ended early
            rounds.close()
    text = "".join(shown) if stopped else pair.target_tok.decode(ids, skip_special_tokens=True)
    verified = None
    if rows:
        verified = Verified(draft_ids, ctx.gen_ids, ctx.tail, ids, torch.cat([r[0] for r in rows]),
                            torch.cat([r[1] for r in rows]))
    summary = {**metrics.summary(), "verify": None if sampling.greedy else mode, "lossless": lossless}
    return Result(text=text, token_ids=ids, metrics=summary, raw=metrics, verified=verified,
                  finish_reason=_finish(ids, stop, stopped))
