"""The memory's index: the longest suffix of the context found in any entry, the continuation that
most often followed it (the latest on a tie), cut where its chance falls below min_prob; the same
answers built at once or entry by entry; nothing matched across two entries."""

import numpy as np
import pytest

from omnidraft.memory.config import MemoryConfig
from omnidraft.memory.index import SuffixIndex, gram_hash, gram_hashes


def test_the_scalar_hash_is_the_vectorised_one_and_no_gram_crosses_a_sentinel():
    rng = np.random.default_rng(0)
    toks = rng.integers(0, 150_000, 60).astype(np.int32)
    toks[[20, 41]] = -1
    for n in (3, 8):
        hashes, ends = gram_hashes(toks, n)
        assert [int(h) for h in hashes] == [gram_hash(toks[e - n:e]) for e in ends]
        assert all((toks[e - n:e] >= 0).all() for e in ends)
        assert len(ends) == (20 - n + 1) + (20 - n + 1) + (18 - n + 1)


def test_finds_the_longest_match_and_the_most_frequent_continuation():
    index = SuffixIndex.build([(1, [1, 2, 3, 4, 5, 6]), (2, [9, 2, 3, 4, 7, 7]), (3, [2, 3, 4, 5, 9])])
    r = index.find([0, 2, 3, 4], 8)  # "2 3 4" thrice: 5 twice, 7 once; then 6 or 9 (a tie: the latest)
    assert (r.length, r.continuation, r.occurrences) == (3, [5, 9], 3)
    assert r.probs == pytest.approx([2 / 3, 1 / 3]) and r.entries == (3,) and r.priced_as == "memory"  # 2 of 3
    assert r.support == (3, 2) and r.steps == pytest.approx((2 / 3, 1 / 2))  # each id's share of those followed
    r = index.find([1, 2, 3, 4], 8)  # "1 2 3 4" once: its entry's rest, at full chance
    assert (r.length, r.continuation, r.probs, r.entries) == (4, [5, 6], [1.0, 1.0], (1,))
    assert r.steps == (-1.0, -1.0)  # read from one occurrence: nothing agreed, nothing split
    assert r.priced_as == "memory-unsure"  # a short match seen once: priced apart
    assert index.find([5, 6, 9], 8) is None  # 6 ends entry 1 and 9 starts none: no match across entries
    assert index.find([7, 8, 2, 3], 8) is None  # two ids: shorter than the short n-gram
    assert index.find([2, 3, 4], 1).continuation == [5]


def test_a_continuation_stops_where_its_chance_falls_below_min_prob():
    entries = [(i, [7, 7, 7, 100 + i, 1]) for i in range(22)]  # every entry goes its own way after "7 7 7"
    entries.append((22, [7, 7, 7, 55, 56, 1]))
    entries.append((23, [7, 7, 7, 55, 57, 1]))
    index = SuffixIndex.build(entries, MemoryConfig(min_prob=0.1))
    assert index.find([7, 7, 7], 8) is None  # 55 follows 2 of 24: under 0.1
    index = SuffixIndex.build(entries, MemoryConfig(min_prob=0.05))
    r = index.find([7, 7, 7], 8)
    assert r.continuation == [55] and r.probs == pytest.approx([2 / 24])  # then 56 or 57: 1/24 < 0.05
    assert r.priced_as == "memory-unsure"  # its occurrences disagreed: priced apart from sure recalls


def test_a_long_match_is_found_past_the_recent_occurrences_of_its_short_suffix():
    cfg = MemoryConfig(candidates=4)
    old = (0, [11, 12, 13, 14, 15, 16, 1, 2, 3, 42, 43])
    noise = [(i, [1, 2, 3, 90 + i]) for i in range(1, 20)]  # "1 2 3" far more often, more recently
    index = SuffixIndex.build([old, *noise], cfg)
    r = index.find([11, 12, 13, 14, 15, 16, 1, 2, 3], 8)  # the long table finds the old occurrence
    assert (r.length, r.continuation, r.priced_as) == (9, [42, 43], "memory")  # once, but a long match
    assert index.find([5, 1, 2, 3], 8).continuation == [109]  # a short match: the latest of 4 recent


def test_built_at_once_or_entry_by_entry_it_answers_the_same():
    rng = np.random.default_rng(1)
    entries = [(i, rng.integers(0, 12, rng.integers(5, 40)).tolist()) for i in range(1, 60)]
    whole = SuffixIndex.build(entries)
    grown = SuffixIndex()
    for e in range(0, len(entries), 7):
        grown.add(entries[e:e + 7])
    assert grown.tokens == whole.tokens == sum(len(ids) for _, ids in entries)
    assert all((a.keys == b.keys).all() and (a.ends == b.ends).all() for a, b in zip(whole.tables, grown.tables))
    for _ in range(200):
        context = rng.integers(0, 12, 20).tolist()
        assert whole.find(context, 16) == grown.find(context, 16)
