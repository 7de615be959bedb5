"""The offline distillation corpus: prompts (and, where the data has one, a reference answer) to
align a drafter to a target before its first user prompt, and the held-out prompts that judge it.

Code: HumanEval problems ``CORPUS_CODE`` (prompt + canonical solution); the problems before them
and after them stay out (calibration, demos and benchmarks use them). Chat: ShareGPT's first
human turns (and the assistant's first answer) from ``CORPUS_CHAT_START`` on, far past the turns
any benchmark reads; our own CHAT_PROMPTS are never in it. Knows data files; nothing about models.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass

from omnidraft.prompts import CHAT_PROMPTS, humaneval, humaneval_path, sharegpt_conversations

CORPUS_CODE = range(64, 144)  # HumanEval problems in the corpus (0-63 and 144-163 are held out)
CORPUS_CHAT_START = 4000  # the first ShareGPT turn in the corpus (benchmarks read the first ~1000)
HELDOUT_CODE = range(40, 64)  # held-out code prompts: the guard's and the benchmark's
HELDOUT_CHAT = range(10, 20)  # held-out chat prompts (CHAT_PROMPTS, written for OmniDraft)
# held-out ShareGPT first turns (benchmarks only), before the corpus's turns in the same count
HELDOUT_SHAREGPT = range(3000, 3040)


@dataclass(frozen=True)
class Sample:
    prompt: str
    answer: str  # a reference answer ("" where the data has none)
    chat: bool  # through the chat template
    source: str  # "humaneval/<n>" or "sharegpt/<n>"


def code_samples(limit: int = len(CORPUS_CODE)) -> list[Sample]:
    """HumanEval corpus problems (the first ``limit``): the prompt and its canonical solution."""
    with gzip.open(humaneval_path(), "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Sample(rows[i]["prompt"], rows[i]["canonical_solution"], False, f"humaneval/{i}")
            for i in CORPUS_CODE[:limit] if i < len(rows)]


def chat_samples(limit: int) -> list[Sample]:
    """``limit`` ShareGPT conversations from the corpus start: first human turn and first answer."""
    return [Sample(human, answer, True, f"sharegpt/{CORPUS_CHAT_START + n}")
            for n, (human, answer) in enumerate(sharegpt_conversations(limit, start=CORPUS_CHAT_START))]


def corpus(code: int, chat: int) -> list[Sample]:
    """``code`` HumanEval and ``chat`` ShareGPT samples interleaved (one code, one chat, while
    both last): the order a resumable job walks, the same on every machine."""
    code_s, talk = code_samples(code) if code else [], chat_samples(chat) if chat else []
    out: list[Sample] = []
    for i in range(max(len(code_s), len(talk))):
        out += [code_s[i]] if i < len(code_s) else []
        out += [talk[i]] if i < len(talk) else []
    return out


def heldout_sharegpt(n: int) -> list[str]:
    """The first ``n`` held-out ShareGPT first turns: real users' chat, never in the corpus."""
    n = min(n, len(HELDOUT_SHAREGPT))
    return [human for human, _ in sharegpt_conversations(n, start=HELDOUT_SHAREGPT.start)] if n else []


def heldout(code: int = len(HELDOUT_CODE), chat: int = len(HELDOUT_CHAT)) -> list[tuple[str, bool]]:
    """Held-out prompts (text, chat), the first ``code`` and ``chat`` of each set: never in the corpus."""
    return [(p, False) for p in humaneval(limit=min(code, len(HELDOUT_CODE)), start=HELDOUT_CODE.start)] + \
        [(CHAT_PROMPTS[i], True) for i in HELDOUT_CHAT[:chat]]
