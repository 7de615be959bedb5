"""decode/rejections.py: each round's proposed tokens counted by position and kind, and the first
rejection blamed on the drafter, the translation, a draft that ended inside the target's token,
or a special token; two translators compared on the same drafts (real SmolLM2 -> Qwen2.5
vocabulary map)."""

import pytest

from omnidraft.decode.loop import Round
from omnidraft.decode.rejections import Breakdown, paired_accepted
from omnidraft.decode.verify import Verdict
from omnidraft.translate.proposal import Proposal
from omnidraft.translate.strings import StringTranslator
from omnidraft.translate.vocab import build

from ..conftest import vocab_len


@pytest.fixture(scope="module")
def vmap(smollm_tok, qwen_tok):
    return build(smollm_tok, qwen_tok, vocab_len(smollm_tok), vocab_len(qwen_tok))


def _round(drafts, target_ids, accepted, wanted, *, consumed=None, from_cache=None):
    m = len(target_ids)
    prop = Proposal(list(target_ids), [(i, i + 1) for i in range(m)], [0] * m, from_cache or [False] * m,
                    m if consumed is None else consumed, list(drafts))
    return Round([*target_ids[:accepted], wanted], prop, Verdict(accepted, wanted), None, 0.0, 0.0, 0.0, 0.0)


def test_blame_and_counts(vmap, smollm_tok, qwen_tok):
    d = smollm_tok.convert_tokens_to_ids
    t = qwen_tok.convert_tokens_to_ids
    hello, world = d("Ġhello"), d("Ġworld")
    direct = [vmap.direct(hello), vmap.direct(world)]
    assert direct == [t("Ġhello"), t("Ġworld")]
    b = Breakdown(vmap)
    b.add(_round([hello, world], direct, 1, t("Ġthe")))  # drafted " world", the target wrote " the"
    b.add(_round([hello, world], direct, 0, t("Ġh")))  # the text goes on with " h": translation's fault
    b.add(_round([d("Ġh")], [t("Ġh")], 0, t("Ġhello")))  # " h" ends inside the target's " hello"
    b.add(_round([hello], direct[:1], 0, qwen_tok.eos_token_id))  # the target ends the turn
    b.add(_round([hello, world], direct, 2, t("Ġ!")))  # all accepted: nothing to blame
    b.add(_round([hello, world], direct[:1], 0, t("Ġthe"), consumed=1))  # " world" left untranslated
    s = b.summary()
    assert s["first_rejection_cause"] == {"drafter": 2, "translation": 1, "draft ended": 1, "special": 1}
    assert [(p["proposed"], p["accepted"]) for p in s["by_position"]] == [(6, 2), (3, 1)]
    assert s["by_kind"]["same token"]["proposed"] == 9 and s["all_accepted_rounds"] == 1
    assert s["cut_rounds"] == 1 and s["untranslated_drafts"] == 1


def test_kinds_from_how_the_text_lines_up(vmap, smollm_tok, qwen_tok):
    d = smollm_tok.convert_tokens_to_ids
    t = qwen_tok.convert_tokens_to_ids
    b = Breakdown(vmap)
    # two drafter tokens -> one target token (an n-gram cache entry), accepted
    merge = Proposal([t("Ġhello")], [(0, 2)], [0], [True], 2, [d("Ġh"), d("ello")])
    b.add(Round([t("Ġhello"), t("Ġthe")], merge, Verdict(1, t("Ġthe")), None, 0.0, 0.0, 0.0, 0.0))
    # one drafter token -> two target tokens; the target wanted the drafter's own token
    split = Proposal([t("Ġh"), t("ello")], [(0, 1), (0, 1)], [0, 1], [False, False], 1, [d("Ġhello")])
    b.add(Round([t("Ġhello")], split, Verdict(0, t("Ġhello")), None, 0.0, 0.0, 0.0, 0.0))
    special = Proposal([qwen_tok.eos_token_id], [(0, 1)], [0], [False], 1, [d("Ġhello")])
    b.add(Round([t("Ġhi")], special, Verdict(0, t("Ġhi")), None, 0.0, 0.0, 0.0, 0.0))
    s = b.summary()
    kinds = {k: (v["proposed"], v["accepted"], v["first_rejections"]) for k, v in s["by_kind"].items()}
    assert kinds == {"same token": (0, 0, 0), "merge": (1, 1, 0), "split": (2, 0, 1), "special": (1, 0, 1)}
    assert s["first_rejection_cause"]["translation"] == 1 and s["first_rejection_cause"]["special"] == 1
    assert (s["ngram_cache"]["proposed"], s["ngram_cache"]["accepted"]) == (1, 1)


def test_paired_acceptance_on_the_same_drafts(vmap, smollm_tok, qwen_tok):
    d = smollm_tok.convert_tokens_to_ids
    t = qwen_tok.convert_tokens_to_ids
    prompt = qwen_tok.encode("Say", add_special_tokens=False)
    # round 1 proposed " h" "ello" token for token; the target writes " hello" (slem merges: accepted)
    split = Proposal([t("Ġh"), t("ello")], [(0, 1), (1, 2)], [0, 0], [False, False], 2, [d("Ġh"), d("ello")])
    r1 = Round([t("Ġhello")], split, Verdict(0, t("Ġhello")), None, 0.0, 0.0, 0.0, 0.0)
    # round 2: both propose " world" then " the"; the target writes " world" "!"
    same = Proposal([t("Ġworld"), t("Ġthe")], [(0, 1), (1, 2)], [0, 0], [False, False], 2,
                    [d("Ġworld"), d("Ġthe")])
    r2 = Round([t("Ġworld"), t("!")], same, Verdict(1, t("!")), None, 0.0, 0.0, 0.0, 0.0)
    # a round without a draft proposes nothing for either
    r3 = Round([t("Ġbye")], Proposal(), Verdict(0, t("Ġbye")), None, 0.0, 0.0, 0.0, 0.0)
    got = paired_accepted([r1, r2, r3], prompt, StringTranslator(vmap, qwen_tok), vmap)
    assert got == {"accepted": 1, "other_accepted": 2, "rounds": 2, "differ": 1, "other_more": 1}
