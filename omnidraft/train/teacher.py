"""Training records without a user: the target's distributions over a text, teacher-forced in one
target call, as the same ``Record`` a verified generation makes (records.py), so the daemon's
trainer, losses and guard take them unchanged.

The text is a corpus answer (``teacher_record``) or the target's own greedy continuation
(``greedy_answer``, one target call per token; ``greedy_answers``, one batched generation for
many prompts, where a step of a batch costs about one of a prompt: on a GPU). Either way the drafter-side ids come from the
same reverse translation decoding uses (translate/reverse.py), and the rows are the target's
top-k at every answer position. Knows the LM contract, tokenizers and the vocabulary map;
nothing about where samples come from or how they are trained on.
"""

from __future__ import annotations

import torch

from omnidraft.decode.generate import Verified
from omnidraft.decode.target import topk_rows
from omnidraft.decode.text import encode_prompt
from omnidraft.models.lm import LM, model_device
from omnidraft.train.records import Record, build_record
from omnidraft.translate.reverse import DraftContext


def answer_ids(target_tok, answer: str, max_tokens: int) -> list[int]:
    """The target's ids of a reference answer, at most ``max_tokens``."""
    return [int(i) for i in target_tok(answer, add_special_tokens=False)["input_ids"][:max_tokens]]


@torch.no_grad()
def greedy_answer(target: LM, prompt_ids: list[int], max_tokens: int, stop: set[int]) -> list[int]:
    """The target's own greedy continuation of ``prompt_ids`` (up to ``max_tokens``, stopping
    before a stop id): what it would answer alone."""
    logits = target.sync(prompt_ids).logits[-1]
    out: list[int] = []
    while len(out) < max_tokens:
        nxt = int(logits.argmax())
        if nxt in stop:
            break
        out.append(nxt)
        logits = target.extend([nxt], last_only=True).logits[-1]
    return out


@torch.no_grad()
def greedy_answers(model, prompts: list[list[int]], max_tokens: int, stop: set[int]) -> list[list[int]]:
    """``greedy_answer`` of each prompt (target ids) by one left-padded batched generation of the
    HF causal LM ``model`` on its device; each answer cut before its first stop id. The batch's
    arithmetic differs from one prompt's in rounding: on near-ties its text may too (these are
    training texts; no user output comes from here)."""
    from transformers import GenerationConfig

    dev = model_device(model)
    pad, width = min(stop, default=0), max(len(p) for p in prompts)  # pads are masked: any id does
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)  # [B, W] left-padded
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[b, width - len(p):] = 1
    gen = GenerationConfig(max_new_tokens=max_tokens, do_sample=False, eos_token_id=sorted(stop), pad_token_id=pad)
    out = model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), generation_config=gen)  # [B, W + T]
    answers = []
    for row in out[:, width:].tolist():
        cut = next((i for i, t in enumerate(row) if t in stop), len(row))
        answers.append(row[:cut])
    return answers


@torch.no_grad()
def teacher_record(pair, target: LM, prompt: str, chat: bool, answer: list[int], topk: int) -> Record | None:
    """One record teaching the drafter the target's distribution at every position of ``answer``
    (target ids) after ``prompt``; None when the answer is empty. ``pair``: a PairState (the two
    tokenizers and the vocabulary map). One target call: the cache is reset and the prompt and
    answer run together."""
    if not answer:
        return None
    t_prompt = encode_prompt(pair.target_tok, prompt, chat=chat)
    ids = t_prompt + answer
    target.reset()
    logits = target.extend(ids).logits[len(t_prompt) - 1:len(ids) - 1]  # [len(answer), V]: before each answer id
    top_ids, top_probs = (t.cpu() for t in topk_rows(logits, topk))  # a target on a GPU ranks there
    ctx = DraftContext(pair.draft_tok, pair.vmap, encode_prompt(pair.draft_tok, prompt, chat=chat))
    ctx.append_target(answer)
    return build_record(pair.vmap, Verified(ctx.prompt_ids, ctx.gen_ids, ctx.tail, answer, top_ids, top_probs))
