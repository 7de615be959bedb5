"""Generation front door: encode the prompt, run one decoding strategy, stream the text.

Knows how strategies are called and how text is streamed; the decode loops live in
decode/autoregressive.py and decode/loop.py, the strategies' proposers in propose/. decode/
imports propose/ in this direction only: the loop consumes proposers through the ``Proposer``
protocol and this front door builds one from a ``SpecConfig``; proposers know nothing of the loop
(the sampler both use is omnidraft/sampling.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator

import torch

from omnidraft.decode.autoregressive import decode_ar
from omnidraft.decode.draft_length import DraftLength, FixedK
from omnidraft.decode.loop import Round, decode
from omnidraft.decode.metrics import Metrics
from omnidraft.decode.modes import check_verify_mode, default_verify_mode, is_lossless
from omnidraft.decode.ownership import own
from omnidraft.sampling import SamplingConfig
from omnidraft.decode.target import LocalTarget
from omnidraft.decode.text import Detokenizer, drained, encode_prompt, model_eos_ids, stop_ids
from omnidraft.errors import OmniDraftError
from omnidraft.models.lm import LM
from omnidraft.propose.config import SpecConfig
from omnidraft.propose.lookup import ContextIndex, LookupConfig
from omnidraft.propose.registry import get
from omnidraft.train.records import build_record
from omnidraft.translate.reverse import DraftContext


@dataclass
class Result:
    text: str
    token_ids: list[int]  # the target's new tokens
    metrics: dict = field(default_factory=dict)  # Metrics.summary() + verify mode and lossless
    raw: Metrics | None = None  # the counters and per-step timings behind the summary
    record: object | None = None  # records.Record for the trainer, when asked for

    @property
    def lossless(self) -> bool:
        """True when the output is distributed exactly as the target's own (modes.py)."""
        return bool(self.metrics.get("lossless", True))


def check_budget(prompt_ids: list[int], max_new_tokens: int, model) -> int:
    """max_new_tokens clipped to the context window; an error if the prompt alone overflows it."""
    if max_new_tokens < 1:
        raise OmniDraftError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    room = model.max_length - len(prompt_ids)
    if room < 1:
        raise OmniDraftError(
            f"prompt is {len(prompt_ids)} tokens, longer than {getattr(model, 'name', 'the target')}'s context window "
            f"of {model.max_length}", "shorten the prompt")
    return min(max_new_tokens, room)


def stream(token_chunks: Iterator[list[int]], detok: Detokenizer, sink: list[int]) -> Iterator[str]:
    """Text pieces from chunks of new token ids; every id is also appended to ``sink``."""
    for ids in token_chunks:
        sink.extend(ids)
        piece = detok.push(ids)
        if piece:
            yield piece


def generate_ar(target: LM, tok, prompt: str, *, max_new_tokens: int = 128,
                sampling: SamplingConfig = SamplingConfig(), chat: bool = False,
                on_text: Callable[[str], None] | None = None) -> Result:
    """Plain autoregressive generation with the target alone (strategy `ar`)."""
    prompt_ids = encode_prompt(tok, prompt, chat=chat)
    budget = check_budget(prompt_ids, max_new_tokens, target)
    metrics = Metrics("ar")
    ids: list[int] = []
    with own(target, "target model") as lm:
        chunks = decode_ar(lm, prompt_ids, max_new_tokens=budget, sampling=sampling,
                           stop=stop_ids(tok, model_eos_ids(lm)),
                           metrics=metrics)
        for piece in stream(chunks, Detokenizer(tok, prompt_ids), ids):
            if on_text:
                on_text(piece)
    text = tok.decode(ids, skip_special_tokens=True)
    summary = {**metrics.summary(), "verify": None, "lossless": True}
    return Result(text=text, token_ids=ids, metrics=summary, raw=metrics)


def generate_speculative(drafter: LM, target, pair, prompt: str, *, cfg: SpecConfig,
                         max_new_tokens: int = 128, sampling: SamplingConfig = SamplingConfig(),
                         verify_mode: str | None = None, chat: bool = False,
                         on_text: Callable[[str], None] | None = None, record_topk: int = 0,
                         head=None, draft_length: DraftLength | None = None,
                         on_round: Callable[[Round], None] | None = None, lookup: LookupConfig | None = None,
                         earlier: list[int] | None = None) -> Result:
    """Speculative generation with ``cfg.strategy`` (`ar` delegates to generate_ar).

    ``target``: a model (any LM: verified in-process by a LocalTarget) or any Target (e.g.
    serve.remote.RemoteTarget, set up with its own sampling and mode). ``record_topk`` > 0 also
    builds the training record. ``verify_mode`` (sampling only): rejection | point-mass;
    default: the strategy's lossless mode (modes.py). A RemoteTarget carries its own mode.
    ``head``: the pair's AcceptanceHead, used when ``cfg.gamma`` is set (adaptive drafting).
    ``draft_length``: how many tokens each round drafts (default ``cfg.k`` every round; a
    ``CostModelK`` chooses it by the cost model, 0 when the target alone is faster).
    ``on_round``: called with every round as it commits (e.g. decode/rejections.py).
    ``lookup``: also propose ids copied from the context (propose/lookup.py) where the draft
    length's cost model prefers them; ``earlier``: target ids of earlier turns to copy from too.
    """
    if not get(cfg.strategy).speculative:
        if hasattr(target, "verify"):
            raise OmniDraftError(f"strategy {cfg.strategy!r} runs the target in-process",
                                 "pass a local target model")
        return generate_ar(target, pair.target_tok, prompt, max_new_tokens=max_new_tokens,
                           sampling=sampling, chat=chat, on_text=on_text)
    pieces = stream_speculative(drafter, target, pair, prompt, cfg=cfg, max_new_tokens=max_new_tokens,
                                sampling=sampling, verify_mode=verify_mode, chat=chat,
                                record_topk=record_topk, head=head, draft_length=draft_length,
                                on_round=on_round, lookup=lookup, earlier=earlier)
    return drained(pieces, on_text)


def stream_speculative(drafter: LM, target, pair, prompt: str, *, cfg: SpecConfig,
                       max_new_tokens: int = 128, sampling: SamplingConfig = SamplingConfig(),
                       verify_mode: str | None = None, chat: bool = False, record_topk: int = 0,
                       head=None, draft_length: DraftLength | None = None,
                       on_round: Callable[[Round], None] | None = None, lookup: LookupConfig | None = None,
                       earlier: list[int] | None = None) -> Generator[str, None, Result]:
    """generate_speculative as a generator: yields text pieces as rounds commit tokens and
    returns the Result (``result = yield from stream_speculative(...)``).

    Each call runs on its own state: in-process models are forked (own KV cache, shared
    weights); a drafter program or a target session in use by another generation is an error."""
    check_verify_mode(verify_mode)
    local = not hasattr(target, "verify")  # a model (LM) to verify in-process, else a Target
    if local:
        verify_mode = verify_mode or default_verify_mode(cfg.strategy)
    else:  # a Target object (remote, fallback) was built with its mode
        verify_mode = (getattr(target, "mode", None) or verify_mode
                       or default_verify_mode(cfg.strategy, remote=True))
    lossless = is_lossless(cfg.strategy, verify_mode, sampling)
    target_ids = encode_prompt(pair.target_tok, prompt, chat=chat)
    draft_ids = encode_prompt(pair.draft_tok, prompt, chat=chat)
    metrics = Metrics(cfg.strategy)
    ids: list[int] = []
    rows: list[tuple[torch.Tensor, torch.Tensor]] = []
    with own(drafter, "drafter") as dlm, own(target, "target") as tgt:
        verifier = LocalTarget(tgt, sampling, verify_mode, record_topk) if local else tgt
        budget = check_budget(target_ids, max_new_tokens, verifier)  # target tokens
        proposer = get(cfg.strategy).proposer(pair, dlm, sampling, cfg, head)
        ctx = DraftContext(pair.draft_tok, pair.vmap, draft_ids)
        rounds = decode(proposer, verifier, ctx, target_ids, k=draft_length or FixedK(cfg.k),
                        max_new_tokens=budget, stop=stop_ids(pair.target_tok, verifier.eos_ids),
                        lookup=None if lookup is None else ContextIndex(lookup, earlier))

        def committed() -> Iterator[list[int]]:  # each round folded into metrics and record rows
            for rnd in rounds:
                metrics.add(rnd)
                if on_round:
                    on_round(rnd)
                if record_topk and rnd.rows is not None:
                    rows.append(rnd.rows)
                yield rnd.committed

        yield from stream(committed(), Detokenizer(pair.target_tok, target_ids), ids)
    text = pair.target_tok.decode(ids, skip_special_tokens=True)
    record = None
    if rows:
        record = build_record(pair.vmap, draft_ids, ctx.gen_ids, ctx.tail, ids,
                              torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows]))
    summary = {**metrics.summary(), "verify": None if sampling.greedy else verify_mode, "lossless": lossless}
    return Result(text=text, token_ids=ids, metrics=summary, raw=metrics, record=record)
