"""Teacher-forced records: the target's own greedy answer, teacher-forced in one call, makes the
record a verified speculative generation of the same prompt makes (what the daemon trains on)."""

import warnings

import torch

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_speculative
from omnidraft.decode.target import LocalTarget
from omnidraft.decode.text import encode_prompt, stop_ids
from omnidraft.propose.config import SpecConfig
from omnidraft.train.records import build_record
from omnidraft.train.teacher import answer_ids, greedy_answer, greedy_answers, teacher_record

PROMPTS = [("def add(a, b):\n", False), ("Why is the sky blue?", True)]


def test_a_teacher_record_of_the_targets_answer_is_the_record_its_verification_makes(cross):
    drafter, target, pair = cross
    for prompt, chat in PROMPTS:
        res = generate_speculative(drafter, LocalTarget(target), pair, prompt, cfg=SpecConfig("omnidraft"),
                                   k=FixedK(4), max_new_tokens=24, chat=chat, record_topk=64)
        t_prompt = encode_prompt(pair.target_tok, prompt, chat=chat)
        answer = greedy_answer(target, t_prompt, 24, stop_ids(pair.target_tok))
        assert answer == res.token_ids  # the target's own greedy answer, as the lossless pair gave it
        want = build_record(pair.vmap, res.verified)
        got = teacher_record(pair, target, prompt, chat, answer, 64)
        for name in ("draft_ids", "kl_row", "ngram_first", "ngram_len", "ngram_row", "ngram_first_direct"):
            assert torch.equal(getattr(got, name), getattr(want, name)), name
        assert got.gen_start == want.gen_start
        # the rows' probabilities (sorted: near-uniform random logits may swap ids of equal mass)
        assert torch.allclose(got.row_probs.float().sort(1).values, want.row_probs.float().sort(1).values, atol=1e-3)
        assert torch.allclose(got.row_other.float(), want.row_other.float(), atol=1e-3)


def test_a_corpus_answer_is_cut_and_an_empty_one_makes_no_record(cross):
    _, target, pair = cross
    ids = answer_ids(pair.target_tok, "return a + b\n" * 40, 16)
    assert len(ids) == 16
    rec = teacher_record(pair, target, "def add(a, b):\n", False, ids, 8)
    assert rec.length - rec.gen_start > 0 and rec.row_ids.shape[1] <= 8
    assert teacher_record(pair, target, "def add(a, b):\n", False, [], 8) is None


def test_batched_greedy_answers_are_each_prompts_own_and_stop_where_it_would(cross):
    _, target, pair = cross
    texts = PROMPTS + [("x = [1, 2, 3]\n# the sum of x, printed\n", False)]
    prompts = [encode_prompt(pair.target_tok, p, chat=c) for p, c in texts]
    assert len({len(p) for p in prompts}) == len(prompts)  # left padding is exercised
    stop = stop_ids(pair.target_tok)
    one = [greedy_answer(target, ids, 20, stop) for ids in prompts]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert greedy_answers(target.model, prompts, 20, stop) == one
    assert not caught, [str(w.message) for w in caught]
    cut = stop | {one[0][5]}  # a token of the first answer becomes a stop: answers end before it
    want = [greedy_answer(target, ids, 20, cut) for ids in prompts]
    assert want[0] == one[0][:one[0].index(one[0][5])]
    assert greedy_answers(target.model, prompts, 20, cut) == want
