"""Distillation losses on small hand-computed cases."""

import math

import pytest
import torch

from omnidraft.train.losses import direct_loss, ngram_approx_kl, ngram_nll


def _logq(probs):
    return torch.tensor(probs).log().unsqueeze(0)


def test_direct_kl_by_hand():
    # drafter q over 4 ids: [0.5, 0.2, 0.2, 0.1]; target top-k stored as drafter ids {0, 1}
    # with p = [0.6, 0.3], rest 0.1. Bins: q = [0.5, 0.2, 0.3], p = [0.6, 0.3, 0.1].
    logq = _logq([0.5, 0.2, 0.2, 0.1])
    rows = torch.tensor([[0, 1]]), torch.tensor([[0.6, 0.3]]), torch.tensor([0.1])
    q, p = [0.5, 0.2, 0.3], [0.6, 0.3, 0.1]
    kl = sum(a * math.log(a / b) for a, b in zip(q, p))
    fkl = sum(b * math.log(b / a) for a, b in zip(q, p))
    m = [(a + b) / 2 for a, b in zip(q, p)]
    jsd = 0.5 * sum(a * math.log(a / c) for a, c in zip(q, m)) + 0.5 * sum(b * math.log(b / c) for b, c in zip(p, m))
    assert direct_loss(logq, *rows, "kl").item() == pytest.approx(kl, abs=1e-6)
    assert direct_loss(logq, *rows, "fkl").item() == pytest.approx(fkl, abs=1e-6)
    assert direct_loss(logq, *rows, "jsd").item() == pytest.approx(jsd, abs=1e-6)


def test_direct_kl_zero_when_equal_and_padding_ignored():
    logq = _logq([0.6, 0.3, 0.05, 0.05])
    rows = torch.tensor([[0, 1, -1]]), torch.tensor([[0.6, 0.3, 0.0]]), torch.tensor([0.1])
    assert direct_loss(logq, *rows).item() == pytest.approx(0.0, abs=1e-6)


def test_ngram_nll_by_hand():
    out = ngram_nll(torch.tensor([math.log(0.5), math.log(0.25)]), torch.tensor([0.2, 0.2]))
    assert out.tolist() == pytest.approx([0.2 * math.log(2), 0.2 * math.log(4)])


def test_ngram_approx_kl_by_hand():
    # first sub-token q = [0.5, 0.3, 0.2] (drafter ids 0..2); the segment's product q'(t) = 0.2;
    # map(d_1) = id 0 is stored: q' bins = [0.5-0.2, 0.3 | t: 0.2 | rest: 1-0.8 = 0.2]
    # target: stored p for ids {0, 1} = [0.1, 0.2], p(t) = 0.6, rest = 0.7 - 0.6 = 0.1
    logq = _logq([0.5, 0.3, 0.2])
    out = ngram_approx_kl(logq, torch.tensor([math.log(0.2)]), torch.tensor([0]), torch.tensor([0.6]),
                          torch.tensor([[0, 1]]), torch.tensor([[0.1, 0.2]]), torch.tensor([0.7]))
    q, p = [0.3, 0.3, 0.2, 0.2], [0.1, 0.2, 0.6, 0.1]
    assert out.item() == pytest.approx(sum(a * math.log(a / b) for a, b in zip(q, p)), abs=1e-6)
