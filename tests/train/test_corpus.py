"""The distillation corpus keeps the held-out prompts out and walks in a fixed order."""

import pytest

from omnidraft.prompts import CHAT_PROMPTS, humaneval
from omnidraft.train.corpus import HELDOUT_CODE, HELDOUT_SHAREGPT, chat_samples, code_samples, corpus, heldout, \
    heldout_sharegpt


def test_no_held_out_prompt_is_in_the_corpus():
    samples = code_samples()
    assert len(samples) == 80 and all(s.answer.strip() and not s.chat for s in samples)
    inside = {s.prompt for s in samples}
    held = heldout()
    assert len(held) == len(HELDOUT_CODE) + 10
    assert not inside & {p for p, _ in held}
    assert not inside & set(humaneval(limit=40))  # the calibration's and demo's prompts stay out too
    assert {p for p, chat in held if chat} <= set(CHAT_PROMPTS)


def test_the_corpus_interleaves_code_and_chat_in_a_fixed_order():
    if not _has_sharegpt():
        pytest.skip("the ShareGPT corpus is the bench extra's")
    a, b = corpus(3, 2), corpus(3, 2)
    assert [s.source for s in a] == [s.source for s in b]
    assert [s.chat for s in a] == [False, True, False, True, False]
    assert all(s.answer for s in a) and not {s.prompt for s in a if s.chat} & set(CHAT_PROMPTS)


def test_held_out_sharegpt_turns_are_not_in_the_largest_corpus():
    if not _has_sharegpt():
        pytest.skip("the ShareGPT corpus is the bench extra's")
    held = heldout_sharegpt(len(HELDOUT_SHAREGPT) + 5)
    assert len(held) == len(HELDOUT_SHAREGPT) == len(set(held))
    assert not set(held) & {s.prompt for s in chat_samples(600)} and not set(held) & set(CHAT_PROMPTS)


def _has_sharegpt() -> bool:
    from omnidraft.errors import OmniDraftError
    from omnidraft.prompts import sharegpt_path

    try:
        sharegpt_path()
    except OmniDraftError:
        return False
    return True
