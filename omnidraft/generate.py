"""Generation front door: encode the prompt, run one decoding strategy, stream the text.

Knows how strategies are called and how text is streamed; strategy internals live in their
own modules (autoregressive.py, speculative.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator

import torch

from .autoregressive import decode_ar
from .errors import OmniDraftError
from .metrics import Metrics
from .runtime import CausalLM
from .sampling import SamplingConfig
from .text import Detokenizer, encode_prompt, stop_ids


@dataclass
class Result:
    text: str
    token_ids: list[int]  # the target's new tokens
    metrics: dict = field(default_factory=dict)  # Metrics.summary()
    raw: Metrics | None = None  # the counters and per-step timings behind the summary
    record: object | None = None  # records.Record for the trainer, when asked for


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


def generate_ar(target: CausalLM, tok, prompt: str, *, max_new_tokens: int = 128,
                sampling: SamplingConfig = SamplingConfig(), chat: bool = False,
                on_text: Callable[[str], None] | None = None) -> Result:
    """Plain autoregressive generation with the target alone (strategy `ar`)."""
    prompt_ids = encode_prompt(tok, prompt, chat=chat)
    budget = check_budget(prompt_ids, max_new_tokens, target)
    metrics = Metrics("ar")
    ids: list[int] = []
    chunks = decode_ar(target, prompt_ids, max_new_tokens=budget, sampling=sampling,
                       stop=stop_ids(tok, target.model.generation_config), metrics=metrics)
    for piece in stream(chunks, Detokenizer(tok, prompt_ids), ids):
        if on_text:
            on_text(piece)
    text = tok.decode(ids, skip_special_tokens=True)
    return Result(text=text, token_ids=ids, metrics=metrics.summary(), raw=metrics)


def generate_speculative(drafter: CausalLM, target, pair, prompt: str, *, cfg,
                         max_new_tokens: int = 128, sampling: SamplingConfig = SamplingConfig(),
                         verify_mode: str | None = None, chat: bool = False,
                         on_text: Callable[[str], None] | None = None, record_topk: int = 0,
                         head=None) -> Result:
    """Cross-vocabulary speculative generation (strategies `tli`, `omnidraft`; `ar` delegates).

    ``target``: a CausalLM (verified in-process) or any Target (e.g. remote.RemoteTarget, set up
    with its own sampling and mode). ``record_topk`` > 0 also builds the training record.
    ``verify_mode`` (sampling only): rejection | point-mass; default by strategy.
    ``head``: the pair's AcceptanceHead, used when ``cfg.gamma`` is set (adaptive drafting).
    """
    if cfg.strategy == "ar":
        if not isinstance(target, CausalLM):
            raise OmniDraftError("strategy 'ar' runs the target in-process", "pass a local target model")
        return generate_ar(target, pair.target_tok, prompt, max_new_tokens=max_new_tokens,
                           sampling=sampling, chat=chat, on_text=on_text)
    pieces = stream_speculative(drafter, target, pair, prompt, cfg=cfg, max_new_tokens=max_new_tokens,
                                sampling=sampling, verify_mode=verify_mode, chat=chat,
                                record_topk=record_topk, head=head)
    while True:
        try:
            piece = next(pieces)
        except StopIteration as done:
            return done.value
        if on_text:
            on_text(piece)


def stream_speculative(drafter: CausalLM, target, pair, prompt: str, *, cfg,
                       max_new_tokens: int = 128, sampling: SamplingConfig = SamplingConfig(),
                       verify_mode: str | None = None, chat: bool = False, record_topk: int = 0,
                       head=None) -> Generator[str, None, Result]:
    """generate_speculative as a generator: yields text pieces as rounds commit tokens and
    returns the Result (``result = yield from stream_speculative(...)``)."""
    from .reverse import DraftContext
    from .speculative import STRING_STRATEGIES, Drafter, decode_speculative
    from .target import LocalTarget

    # sampling: rejection with q' (lossless for tli; rule (2) for omnidraft); string-level
    # strategies have no exact q', so the point-mass rule, lossless for any proposal
    verify_mode = verify_mode or ("point-mass" if cfg.strategy in STRING_STRATEGIES else "rejection")
    local = isinstance(target, CausalLM)
    target_ids = encode_prompt(pair.target_tok, prompt, chat=chat)
    draft_ids = encode_prompt(pair.draft_tok, prompt, chat=chat)
    verifier = LocalTarget(target, sampling, verify_mode, record_topk) if local else target
    budget = check_budget(target_ids, max_new_tokens, verifier)
    budget = min(budget, check_budget(draft_ids, max_new_tokens, drafter))
    translator = pair.translator(cfg.strategy)
    restrict = translator.direct_mask if cfg.strategy == "tli" else None
    metrics = Metrics(cfg.strategy)
    ids: list[int] = []
    rows: list | None = [] if record_topk else None
    ctx = DraftContext(pair.draft_tok, pair.vmap, draft_ids)
    gen_config = target.model.generation_config if local else None
    chunks = decode_speculative(
        Drafter(drafter, sampling, restrict, head), verifier,
        translator, ctx, target_ids, cfg=cfg,
        max_new_tokens=budget, stop=stop_ids(pair.target_tok, gen_config),
        metrics=metrics, cache=translator.cache, rows_out=rows)
    yield from stream(chunks, Detokenizer(pair.target_tok, target_ids), ids)
    text = pair.target_tok.decode(ids, skip_special_tokens=True)
    record = None
    if rows:
        from .records import build_record

        record = build_record(pair.vmap, draft_ids, ctx.gen_ids, ctx.tail, ids,
                              torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows]))
    return Result(text=text, token_ids=ids, metrics=metrics.summary(), raw=metrics, record=record)
