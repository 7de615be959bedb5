"""train/guard.py: the regression guard publishes an improving or unchanged candidate, rejects one
that is significantly worse on the held-out positions, and its power grows with the slice."""

import pytest
import torch

from omnidraft.train.guard import judge, power


def _hits(both: int, before_only: int, after_only: int, neither: int):
    """Paired per-position hits with the given counts of each outcome."""
    b = [True] * both + [True] * before_only + [False] * after_only + [False] * neither
    a = [True] * both + [False] * before_only + [True] * after_only + [False] * neither
    return torch.tensor(b), torch.tensor(a)


def test_an_improving_round_is_published():
    v = judge(*_hits(300, 10, 25, 100))
    assert v.publish and v.after > v.before and (v.wins, v.losses) == (25, 10)


def test_a_slightly_worse_round_on_a_small_slice_is_not_rejected_for_noise():
    v = judge(*_hits(40, 7, 5, 20))  # after < before, but 5 wins of 12 is what chance gives
    assert v.after < v.before and v.publish and v.p_worse > 0.05


def test_a_clearly_worse_round_is_rejected():
    v = judge(*_hits(300, 30, 8, 100))
    assert not v.publish and v.p_worse < 0.01
    assert v.to_dict()["guard_losses"] == 30


def test_power_and_false_rejections():
    assert power(160, 0.0) <= 0.05 and power(20, 0.0) <= 0.05  # no change: rejected at most alpha
    assert power(40, 0.2) < power(160, 0.2) < power(320, 0.2)
    assert power(320, 0.3) > 0.99
    with pytest.raises(ValueError):
        judge(torch.ones(3, dtype=torch.bool), torch.ones(4, dtype=torch.bool))
