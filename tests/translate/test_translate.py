"""Translator contract on a hand-built vocabulary: mapping rule (1) (direct map, n-gram merges
and splits, an unmapped token ending the proposal) and rule (2)'s q', and the exact output
distribution of rejection sampling with that q' against the point-mass rule (no sampling: the
sums over every draft are computed); and a real pair's vocabulary map, built once and read once per
process."""

import numpy as np
import pytest
import torch

from omnidraft.translate.ngram import NgramCache
from omnidraft.translate.token import Translator
from omnidraft.translate.vocab import VocabMap

# drafter ids: 0 "a", 1 "b", 2 "xy" (no target token "xy"), 3 "z" (unmapped, no n-gram)
# target ids:  0 "a", 1 "b", 2 "ab", 3 "c", 4 "x", 5 "y"
D_BYTES = [b"a", b"b", b"xy", b"z"]
T_BYTES = [b"a", b"b", b"ab", b"c", b"x", b"y"]


def toy() -> Translator:
    vmap = VocabMap(d2t=np.array([0, 1, -1, -1]), t2d=np.array([0, 1, -1, -1, -1, -1]),
                    draft_bytes=D_BYTES, target_bytes=T_BYTES, draft_kind="bytes", target_kind="bytes")
    cache = NgramCache(max_n=4)
    assert cache.add((0, 1), (2,), seeded=True)  # merge: a b -> "ab"
    assert cache.add((2,), (4, 5), seeded=True)  # split: "xy" -> x y
    return Translator(vmap, cache)


def test_rule_1_direct_merge_split_and_unmapped():
    tr = toy()
    p = tr.translate([0, 1, 0])  # a b a -> "ab" (n-gram), a (direct)
    assert (p.target_ids, p.spans, p.from_cache, p.consumed) == ([2, 0], [(0, 2), (2, 3)], [True, False], 3)
    p = tr.translate([2, 1])  # xy b -> x y (split, the second determined by the first), b
    assert (p.target_ids, p.sub, p.consumed) == ([4, 5, 1], [0, 1, 0], 2)
    p = tr.translate([1, 3, 0])  # b, then z has no translation: the proposal ends there
    assert (p.target_ids, p.consumed) == ([1], 1)
    assert tr.translate([3]).target_ids == [] and tr.proposal_dists(tr.translate([3]), [3], torch.zeros(0, 4)).shape == (0, 6)
    assert tr.viable([0]) and not tr.viable([3])
    assert tr.translate([0, 1]).prefix(0).target_ids == []


def test_rule_2_is_approximate_and_point_mass_is_exact():
    """Context-free drafter q = (a .5, b .5); target p = [.2, .1, .2, .5, 0, 0]. Every two-token
    draft is translated by the real Translator and its first target token verified; the exact
    output distribution of rejection sampling with rule (2)'s q' departs from p, the point-mass
    rule's equals p."""
    tr = toy()
    q = torch.tensor([0.5, 0.5, 0.0, 0.0])
    p = torch.tensor([0.2, 0.1, 0.2, 0.5, 0.0, 0.0])
    rule2 = torch.zeros(6)
    point = torch.zeros(6)
    for d1 in (0, 1):
        for d2 in (0, 1):
            w = float(q[d1] * q[d2])
            prop = tr.translate([d1, d2])
            t = prop.target_ids[0]
            qt = tr.proposal_dists(prop, [d1, d2], torch.stack([q, q]))[0]  # [6] rule (2)
            acc = min(1.0, float(p[t] / qt[t]))
            resid = torch.clamp(p - qt, min=0.0)
            rule2 += w * (acc * torch.eye(6)[t] + (1 - acc) * resid / resid.sum())
            rest = p.clone()
            rest[t] = 0.0
            point += w * (float(p[t]) * torch.eye(6)[t] + (1 - float(p[t])) * rest / rest.sum())
    assert 0.5 * float((rule2 - p).abs().sum()) > 0.05, rule2
    assert torch.allclose(point, p, atol=1e-6)


def test_entries_from_the_targets_own_tokenisation(smollm_tok, qwen_tok):
    """With the target tokenizer, the draft is cut where its tokens and the target's tokenisation
    of its text (in context) share boundaries: the target is proposed what it would write."""
    from omnidraft.translate.vocab import build

    from ..conftest import vocab_len

    vmap = build(smollm_tok, qwen_tok, vocab_len(smollm_tok), vocab_len(qwen_tok))
    text = "\n        if abs(a - b)"  # SmolLM2: "ĊĠĠĠĠĠĠĠ" ... "(", "a"; Qwen2.5: "Ċ", "ĠĠĠĠĠĠĠ" ... "(a"
    drafts = smollm_tok.encode(text)
    tr = Translator(vmap, NgramCache(max_n=4), qwen_tok)
    p = tr.translate(drafts, history=qwen_tok.encode("def f(a, b):"))
    assert p.target_ids == qwen_tok.encode(text) and p.consumed == len(drafts)
    assert p.spans[:2] == [(0, 1), (0, 1)] and p.sub[:2] == [0, 1]  # one drafter token, two target tokens
    paren = drafts.index(smollm_tok.convert_tokens_to_ids("("))
    assert (paren, paren + 2) in p.spans  # "(" "a" -> "(a"
    q = torch.softmax(torch.randn(len(drafts), vocab_len(smollm_tok)), -1)
    rows = tr.proposal_dists(p, drafts, q)
    j = p.spans.index((paren, paren + 2))
    assert torch.isclose(rows[j, p.target_ids[j]], q[paren, drafts[paren]] * q[paren + 1, drafts[paren + 1]])
    # without it: the drafter's own tokens through the direct map; "ĊĠĠĠĠĠĠĠ" has no Qwen token
    plain = Translator(vmap, NgramCache(max_n=4))
    assert plain.translate(drafts).target_ids == [] and not plain.viable(drafts) and tr.viable(drafts)
    assert qwen_tok.convert_tokens_to_ids("(") in plain.translate(drafts[1:]).target_ids
    # a draft token with no text ends the re-tokenised part: the direct map goes on from there
    eos = smollm_tok.eos_token_id
    tail = tr.translate(drafts + [eos], history=[])
    assert tail.target_ids[: len(p.target_ids)] == p.target_ids
    assert tail.target_ids[len(p.target_ids):] == [vmap.direct(eos)] * (vmap.direct(eos) >= 0)


def test_proposes_what_slem_proposes_for_the_same_draft(smollm_tok, qwen_tok):
    """The default translator's tokens equal the string-level re-tokenisation (slem) wherever the
    draft is text: real code and chat text cut at random points, the drafter's tokens of what
    follows as the draft, the target's tokens before as the committed history."""
    import random

    from omnidraft.prompts import CHAT_PROMPTS, humaneval
    from omnidraft.translate.reverse import DraftContext
    from omnidraft.translate.state import PairState
    from omnidraft.translate.strings import StringTranslator

    from ..conftest import vocab_len

    pair = PairState(smollm_tok, qwen_tok, vocab_len(smollm_tok), vocab_len(qwen_tok))
    ours, slem = Translator(pair.vmap, pair.cache, qwen_tok), StringTranslator(pair.vmap, qwen_tok)
    rng = random.Random(0)
    checked = 0
    for text in humaneval(limit=10) + CHAT_PROMPTS:
        ids = qwen_tok.encode(text)
        for _ in range(10):
            cut = rng.randrange(1, len(ids) - 1)
            history = ids[:cut]
            ctx = DraftContext(smollm_tok, pair.vmap, [])
            ctx.append_target(history)
            drafts = smollm_tok.encode(qwen_tok.decode(ids[cut:]))[:6]
            assert ours.translate(drafts, ctx=ctx, history=history).target_ids == \
                slem.translate(drafts, ctx=ctx, history=history).target_ids
            checked += 1
    assert checked == 300


def test_a_pairs_vocabulary_map_is_built_once_then_read_once_per_process(smollm_tok, qwen_tok, tmp_path, monkeypatch):
    """The map is written to the home on first build; a process reads it from there once and hands
    its later Sessions of the pair the same map (1-2 s a Session open with Qwen's 151,936 ids)."""
    from omnidraft.translate import vocab

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    monkeypatch.setattr(vocab, "_LOADED", {})
    sizes = (len(smollm_tok), len(qwen_tok))
    built = vocab.load_or_build(smollm_tok, qwen_tok, *sizes)
    assert len(list((tmp_path / "vocab").glob("*.npz"))) == 1
    assert vocab.load_or_build(smollm_tok, qwen_tok, *sizes) is built
    monkeypatch.setattr(vocab, "_LOADED", {})  # a new process: read from disk, equal to the built map
    monkeypatch.setattr(vocab, "build", lambda *a: pytest.fail("built again though it was on disk"))
    again = vocab.load_or_build(smollm_tok, qwen_tok, *sizes)
    assert again is not built and np.array_equal(again.d2t, built.d2t) and again.target_bytes == built.target_bytes
