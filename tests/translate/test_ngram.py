"""N-gram cache, seeding from the real vocabularies, and in-context segment learning."""

from omnidraft.translate.align import aligned_segments
from omnidraft.translate.ngram import NgramCache
from omnidraft.translate.ngram_seed import seed
from omnidraft.translate.vocab import build


def test_longest_match_uses_prefix_index():
    c = NgramCache(max_n=3)
    assert c.add((1, 2), (10,)) and c.add((1, 2, 3), (11,)) and c.add((7,), (20, 21))
    assert not c.add((5,), (6,))  # one-to-one is a direct mapping, not an n-gram
    assert c.longest([1, 2, 3, 4], 0) == ((11,), 3)
    assert c.longest([1, 2, 4], 0) == ((10,), 2)
    assert c.longest([1, 4], 0) is None
    assert c.longest([9, 7], 1) == ((20, 21), 1)
    assert c.longest([9, 7], 1, min_len=2) is None
    assert c.is_prefix((1,)) and c.is_prefix((1, 2)) and not c.is_prefix((1, 2, 3))


def test_aligned_segments():
    # bytes: "ab|c|de" (drafter: ab, c, de) vs "a|bc|de" (target: a, bc, de)
    segs = list(aligned_segments([1, 2, 3], [2, 1, 2], [7, 8, 9], [1, 2, 2]))
    assert segs == [((3,), (9,)), ((1, 2), (7, 8))]


def test_seed_from_real_vocabularies(smollm_tok, qwen_tok):
    vm = build(smollm_tok, qwen_tok, 49152, 151936)
    assert 39000 < vm.shared < 39500  # MODELS.md: 39,237 shared strings (+/- special-role entries)
    c = NgramCache(max_n=4)
    n = seed(c, vm, smollm_tok, qwen_tok)
    assert n == len(c) == c.seeded > 10000
    nl3 = smollm_tok.convert_tokens_to_ids("ĊĠĠĠ")  # newline + 3 spaces: one SmolLM2 token
    assert vm.d2t[nl3] < 0
    assert [qwen_tok.convert_ids_to_tokens(t) for t in c.get((nl3,))] == ["Ċ", "ĠĠĠ"]
    # every entry spells the same bytes on both sides
    for key, val in list(c.items())[:2000]:
        assert b"".join(vm.draft_bytes[d] for d in key) == b"".join(vm.target_bytes[t] for t in val)
