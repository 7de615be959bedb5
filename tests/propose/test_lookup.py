"""The context index behind lookup proposals: the longest earlier match, its latest occurrence,
the continuation cut to the span, growth by sync, and a bounded memory."""

import pytest

from omnidraft.errors import OmniDraftError
from omnidraft.propose.lookup import ContextIndex, LookupConfig


def test_the_longest_suffix_that_occurred_before_proposes_what_followed_it():
    idx = ContextIndex(LookupConfig(min_match=2, max_match=4))
    idx.sync([1, 2, 3, 4, 5, 6, 9, 3, 4, 5, 7, 8, 2, 3, 4, 5])
    m = idx.find(span=3)
    # [2, 3, 4, 5] occurred at the start (followed by 6, 9, 3); [3, 4, 5] later, followed by 7
    assert (m.length, m.continuation) == (4, [6, 9, 3])


def test_the_latest_occurrence_of_the_longest_match_wins():
    idx = ContextIndex(LookupConfig(min_match=2, max_match=3))
    idx.sync([7, 8, 1, 7, 8, 2, 7, 8])
    m = idx.find()
    assert (m.length, m.continuation[0]) == (2, 2)


def test_no_match_shorter_than_min_and_the_suffix_itself_is_not_a_match():
    idx = ContextIndex(LookupConfig(min_match=3, max_match=5))
    idx.sync([1, 2, 3, 4])
    assert idx.find() is None  # [2, 3, 4] only ends at the context's end
    idx.sync([1, 2, 3, 4, 9, 2, 3])
    assert idx.find() is None  # [2, 3] is shorter than min_match
    idx.sync([1, 2, 3, 4, 9, 2, 3, 4])
    assert idx.find().continuation[:2] == [9, 2]


def test_earlier_turns_are_context_and_sync_takes_only_what_is_new():
    earlier = [5, 6, 7, 8, 10, 11, 12]
    idx = ContextIndex(LookupConfig(min_match=3, max_match=4), earlier=earlier)
    idx.sync([40, 41])
    assert idx.find() is None
    idx.sync([40, 41, 6, 7, 8])
    assert idx.find(span=2).continuation == [10, 11]
    assert idx.ids == earlier + [40, 41, 6, 7, 8]


def test_forgotten_context_is_never_proposed_and_memory_stays_bounded():
    cfg = LookupConfig(min_match=2, max_match=2, max_tokens=8)
    idx = ContextIndex(cfg)
    seq = [1, 2, 3] + list(range(100, 140))
    idx.sync(seq)
    idx.sync(seq + [1, 2])
    assert idx.find() is None  # [1, 2] ended before the last 8 ids
    assert len(idx.ids) == 8 and len(idx.ends) <= 2 * 1 * 8 + 8


def test_bad_settings_name_the_option():
    with pytest.raises(OmniDraftError, match="min_match"):
        LookupConfig(min_match=5, max_match=3)
    with pytest.raises(OmniDraftError, match="max_span"):
        LookupConfig(max_span=0)
