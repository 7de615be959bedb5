"""Adaptive drafting: the stopping rule, labels, weighted BCE, head training (offline, joint,
interleaved), head persistence, and lossless greedy output with a head deciding draft lengths."""

import copy
import math

import pytest
import torch

from omnidraft.propose.drafter import StopRule
from omnidraft.models.acceptance import AcceptanceHead, HeadConfig
from omnidraft.train.head_labels import acceptance_labels, weighted_bce
from omnidraft.adapters import AdapterStore
from omnidraft.errors import OmniDraftError
from omnidraft.decode.draft_length import K_MAX, CostModelK, FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.decode.target import LocalTarget
from omnidraft.pairs.cost import CostModel
from omnidraft.train.head_trainer import AdaptiveTrainer, HeadTrainer, head_batch
from omnidraft.train.records import Record
from omnidraft.propose.config import SpecConfig
from omnidraft.train.trainer import OnlineTrainer, TrainConfig, attach_lora

from ..conftest import recorded_pair

PROMPTS = ["def add(a, b):\n", "The weather today is", "Liste des courses: ", "x = [1, 2, 3]\n",
           "import os\n", "Dear team,"]


@pytest.fixture(scope="module")
def setup(smollm_tok, qwen_tok):
    return recorded_pair(smollm_tok, qwen_tok, PROMPTS)


def test_stop_rule_on_literal_probabilities():
    r = StopRule.gamma(0.5, min_k=1)
    assert [r.update(p) for p in (0.9, 0.8, 0.6)] == [False, False, True]  # 1-.9, 1-.72, 1-.432
    r.reset()
    assert r.update(0.4)  # 1 - 0.4 = 0.6 > 0.5 right away
    r = StopRule.gamma(0.5, min_k=2)
    assert [r.update(p) for p in (0.1, 0.99)] == [False, True]  # min_k holds the first back
    r = StopRule.gamma(0.9, min_k=1)
    assert [r.update(1.0) for _ in range(K_MAX)] == [False] * K_MAX  # no cap of its own: the round's k is it
    r = StopRule.gamma(0.3, min_k=1)
    assert [r.update(p) for p in (0.8, 0.8)] == [False, True]  # 0.2 <= 0.3, then 0.36 > 0.3


def test_stop_rule_with_a_threshold_per_position():
    """A priced rule: each position has its own threshold, the last holding past them."""
    r = StopRule((0.5, 0.3, 1.0), min_k=1)
    assert [r.update(p) for p in (0.9, 0.5, 0.99)] == [False, False, True]  # .9>=.5, .45>=.3, then 1.0
    r.reset()
    assert [r.update(p) for p in (0.9, 0.3)] == [False, True]  # 0.27 < 0.3
    r = StopRule((0.2,), min_k=1)
    assert [r.update(p) for p in (0.9, 0.5, 0.5, 0.5)] == [False, False, False, True]  # .225, then .1125 < .2


def test_the_rounds_k_ends_a_draft_the_stop_rule_would_go_on_with(setup):
    """A head sure of every token never stops a draft: the drafter drafts exactly the round's k."""
    from omnidraft.propose.base import DraftState
    from omnidraft.propose.registry import get
    from omnidraft.sampling import SamplingConfig
    from omnidraft.translate.reverse import DraftContext

    d, t, pair, _ = setup

    class Sure:  # an acceptance head: P(accept) = 1 for every draft token
        def accept_prob(self, hidden, embedding):
            return 1.0

    cfg = SpecConfig("omnidraft", gamma=0.9)
    for prompt in PROMPTS[:2]:
        for k in (1, 3, K_MAX):
            proposer = get("omnidraft").proposer(pair, d.fork(), SamplingConfig(), cfg, Sure())
            ctx = DraftContext(pair.draft_tok, pair.vmap, pair.draft_tok.encode(prompt))
            state = DraftState(ctx, pair.target_tok.encode(prompt), needs_q=False, target_vocab=t.vocab_size)
            prop = proposer.propose(state, k)
            assert len(prop.drafts) == prop.drafter_forwards == k, (prompt, k, prop.drafts)
            assert prop.accept_p == [1.0] * k  # what the head said of each draft (bench_head.py reads it)


def test_weighted_bce_by_hand():
    z = torch.zeros(2)
    assert math.isclose(float(weighted_bce(z, torch.tensor([1.0, 1.0]), 6.0)), math.log(2), rel_tol=1e-6)
    assert math.isclose(float(weighted_bce(z, torch.tensor([0.0, 0.0]), 6.0)), 6 * math.log(2), rel_tol=1e-6)
    # soft label 0.5 at logit 0: 0.5 log2 + 6 * 0.5 log2
    assert math.isclose(float(weighted_bce(z[:1], torch.tensor([0.5]), 6.0)), 3.5 * math.log(2), rel_tol=1e-6)


def test_labels_by_hand():
    # positions: 0 prompt | 1 direct (row 0) | 2,3 n-gram segment | 4 direct (row 1)
    rec = Record(
        draft_ids=torch.tensor([5, 7, 8, 9, 7], dtype=torch.int32), gen_start=1,
        kl_row=torch.tensor([-1, 0, -1, -1, 1], dtype=torch.int32),
        row_ids=torch.tensor([[7, 3], [4, 7]], dtype=torch.int32),
        row_probs=torch.tensor([[0.6, 0.2], [0.5, 0.1]], dtype=torch.float16),
        row_other=torch.tensor([0.2, 0.4], dtype=torch.float16),
        ngram_p=torch.tensor([0, 0, 0.3, 0.3, 0], dtype=torch.float16),
        ngram_first=torch.tensor([False, False, True, False, False]),
        ngram_len=torch.tensor([0, 0, 2, 0, 0], dtype=torch.int32),
        ngram_row=torch.tensor([-1, -1, 0, -1, -1], dtype=torch.int32),
        ngram_first_direct=torch.tensor([-1, -1, -1, -1, -1], dtype=torch.int32))
    q = torch.tensor([1.0, 0.3, 0.5, 0.4, 0.2])
    ok = torch.tensor([False, True, True, False, False])
    pos, lab = acceptance_labels(rec, q.log(), ok, "ratio")
    assert pos.tolist() == [1, 2, 3, 4]
    # min(1, .6/.3) = 1; interior 1; min(1, .3/(.5*.4)) = 1; min(1, p(7)=.1/.2) = .5
    assert torch.allclose(lab, torch.tensor([1.0, 1.0, 1.0, 0.5]), atol=2e-3)
    rec.ngram_p[2:4] = 0.1
    _, lab = acceptance_labels(rec, q.log(), ok, "ratio")
    assert abs(float(lab[2]) - 0.1 / 0.2) < 2e-3
    _, lab = acceptance_labels(rec, q.log(), ok, "greedy")
    assert lab.tolist() == [1.0, 1.0, 0.0, 0.0]  # the segment needs every sub-token right


def test_head_training_lowers_bce_on_a_fixed_batch(setup):
    d, _, _, records = setup
    torch.manual_seed(0)
    head = AcceptanceHead(d.config.hidden_size, width=32)
    trainer = HeadTrainer(head, d.model, HeadConfig(lr=3e-3, labels="greedy"))
    h, e, y = head_batch(d.model, records, "greedy")
    assert len(y) > 50 and h.shape == e.shape == (len(y), d.config.hidden_size)
    with torch.no_grad():
        before = float(trainer.loss(records))
    for _ in range(5):
        trainer.step(records)
    with torch.no_grad():
        after = float(trainer.loss(records))
    assert after < before, (before, after)


@pytest.mark.parametrize("mode", ["joint", "interleaved", "adapt"])
def test_adaptive_trainer_schedules(setup, mode):
    d, _, _, records = setup
    head = HeadTrainer(AcceptanceHead(d.config.hidden_size, width=32), d.model,
                       HeadConfig(replay_size=4, head_steps=3, batch_size=2))
    distill = None
    if mode != "adapt":
        cfg = TrainConfig(update_interval=3, batch_size=3)
        distill = OnlineTrainer(attach_lora(copy.deepcopy(d.model), cfg), cfg)
        head.model = distill.model  # the head reads the drafter being distilled
    trainer = AdaptiveTrainer(distill, head, mode, update_interval=3)
    infos = [i for r in records for i in trainer.add(r)]
    assert len(trainer.replay) == 4  # bounded replay buffer R
    distill_steps = sum("loss" in i for i in infos)
    head_steps = sum("bce" in i for i in infos)
    assert distill_steps == (0 if mode == "adapt" else 2)
    assert head_steps == {"joint": 2, "interleaved": 6, "adapt": 6}[mode]
    with pytest.raises(OmniDraftError):
        AdaptiveTrainer(None, head, "joint")


def test_head_round_trips_through_the_adapter_store(setup, tmp_path):
    d, _, _, _ = setup
    torch.manual_seed(1)
    head = AcceptanceHead(d.config.hidden_size, width=32)
    torch.nn.init.normal_(head.fc2.weight)
    model = attach_lora(copy.deepcopy(d.model), TrainConfig())
    store = AdapterStore(tmp_path)
    v = store.publish("pair-x", model, extra={"head": head.state_dict()})
    from safetensors.torch import load_file

    back = AcceptanceHead.from_state(load_file(str(store.path("pair-x", v) / "head.safetensors")))
    x, e = torch.randn(3, d.config.hidden_size), torch.randn(3, d.config.hidden_size)
    assert torch.equal(head(x, e), back(x, e))
    assert back.accept_prob(x[0], e[0]) == head.accept_prob(x[0], e[0])


def test_weighted_head_reports_calibrated_probabilities():
    """Trained with reject weight w, the optimum's odds are y / (w (1 - y)); accept_prob undoes it."""
    torch.manual_seed(0)
    head = AcceptanceHead(4, width=8)
    trainer = HeadTrainer(head, None, HeadConfig(mismatch_weight=6.0, lr=0.05))
    x = torch.randn(256, 4)
    y = torch.full((256,), 0.8)
    for _ in range(300):
        trainer.opt.zero_grad()
        weighted_bce(head(x, x), y, 6.0).backward()
        trainer.opt.step()
    raw = float(torch.sigmoid(head(x[:1], x[:1]))[0])
    assert abs(raw - 0.8 / (0.8 + 6 * 0.2)) < 0.02  # what the weighted loss optimises to
    assert abs(head.accept_prob(x[0], x[0]) - 0.8) < 0.02


def test_adaptive_drafting_keeps_greedy_output(setup):
    d, t, pair, _ = setup
    torch.manual_seed(3)
    head = AcceptanceHead(d.config.hidden_size, width=32).eval()
    torch.nn.init.normal_(head.out.weight, std=2.0)  # P(accept) spread over (0, 1)
    for prompt in PROMPTS[:4]:
        ref = generate_ar(LocalTarget(t), pair.target_tok, prompt, max_new_tokens=40).token_ids
        for gamma in (0.3, 0.7):
            res = generate_speculative(d, LocalTarget(t), pair, prompt, cfg=SpecConfig("omnidraft", gamma=gamma),
                                       k=FixedK(8), max_new_tokens=40, head=head)
            assert res.token_ids == ref
        # priced: the cost model decides whether a round drafts, its prices how far the head goes
        model = CostModel({1: 10.0, 2: 10.5, 4: 11.0, 8: 14.0, 9: 14.5}, drafter_ms=1.0)
        dl = CostModelK(model, reached=[100, 90], accepted=[90, 80])
        cfg = SpecConfig("omnidraft", priced=True, stop_below=tuple(model.stop_below(dl.rates(), dl.predicted)))
        priced = generate_speculative(d, LocalTarget(t), pair, prompt, cfg=cfg, k=dl.reaching(), max_new_tokens=40,
                                      head=head)
        assert priced.token_ids == ref
    fixed = generate_speculative(d, LocalTarget(t), pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(8),
                                 max_new_tokens=40).raw
    assert res.raw.proposed / res.raw.steps < fixed.proposed / fixed.steps  # the head cut drafts short
    assert priced.raw.proposed / priced.raw.steps < fixed.proposed / fixed.steps
    with pytest.raises(OmniDraftError, match="one stopping rule"):
        SpecConfig("omnidraft", priced=True, gamma=0.5)
    with pytest.raises(OmniDraftError, match="acceptance head"):
        generate_speculative(d, LocalTarget(t), pair, "x", cfg=SpecConfig("omnidraft", gamma=0.5), k=FixedK(8),
                             max_new_tokens=4)
    with pytest.raises(OmniDraftError, match="HeadConfig.width"):
        HeadConfig(width=4)
