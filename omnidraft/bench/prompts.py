"""The prompt sets suites run on, each held out of every training corpus: ``code`` (HumanEval
completions), ``chat`` (English chat questions), ``sharegpt`` (real users' first turns) and
``copy`` (copy-heavy assistant work, omnidraft/copy_prompts.py: code edits, quotes from a
passage, rewrites, then follow-up turns whose earlier answers are the target's own) and
``conversations`` (omnidraft/conversations.py: three-turn assistant conversations, every turn
measured, its earlier answers the target's own; a count names conversations, not turns); and
``tests``, ``extract``, ``reply`` (omnidraft/recurring.py: recurring assistant work, the held-out
prompts, never in the stream a memory suite fills the pair's memory with).

Knows the package's prompt lists; nothing about rows.
"""

from __future__ import annotations

from omnidraft.bench.rows import Prompt

SETS = ("code", "chat", "sharegpt", "copy", "conversations", "tests", "extract", "reply")


def prompt_sets(counts: dict[str, int]) -> list[Prompt]:
    """The first ``counts[set]`` prompts of each set named, code and chat interleaved with the
    others in SETS order; each prompt's seed is its position (for sampled rows)."""
    from omnidraft.conversations import conversations
    from omnidraft.copy_prompts import copy_prompts
    from omnidraft.recurring import KINDS, recurring
    from omnidraft.train.corpus import heldout, heldout_sharegpt

    unknown = sorted(set(counts) - set(SETS))
    if unknown:
        from omnidraft.errors import OmniDraftError

        raise OmniDraftError(f"unknown prompt set {unknown[0]!r}", f"use {', '.join(SETS)}")
    out = []
    plain = heldout(code=counts.get("code", 0), chat=counts.get("chat", 0))
    out += [("code" if not chat else "chat", text, chat) for text, chat in plain]
    out += [("sharegpt", text, True) for text in heldout_sharegpt(counts.get("sharegpt", 0))]
    out += [(kind, text, True) for kind in KINDS for text in recurring(kind, counts.get(kind, 0), held=True)]
    out += [("copy", turns, True) for turns in copy_prompts()[: counts.get("copy", 0)]]  # single turns first
    out += [("conversations", turns[: t + 1], True) for turns in conversations()[: counts.get("conversations", 0)]
            for t in range(len(turns))]  # every turn, in order
    return [Prompt(kind, text[-1], chat, seed=1000 + i, earlier=tuple(text[:-1])) if isinstance(text, list)
            else Prompt(kind, text, chat, seed=1000 + i) for i, (kind, text, chat) in enumerate(out)]
