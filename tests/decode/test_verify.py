"""Verification functions on literal arrays, and their losslessness by exact statistics."""

import pytest
import torch
from scipy import stats

from omnidraft.decode.verify import verify_greedy, verify_point_mass, verify_rejection


def test_greedy_literal():
    # proposal [5, 7, 9]; target argmax rows [5, 7, 2, 4]: two accepted, correction 2
    v = verify_greedy([5, 7, 9], [5, 7, 2, 4])
    assert (v.accepted, v.token, v.bonus(3)) == (2, 2, False)
    v = verify_greedy([5, 7], [5, 7, 3])
    assert (v.accepted, v.token, v.bonus(2)) == (2, 3, True)
    v = verify_greedy([], [8])
    assert (v.accepted, v.token) == (0, 8)
    v = verify_greedy([1], [0, 3])
    assert (v.accepted, v.token) == (0, 0)


def _g(seed):
    return torch.Generator().manual_seed(seed)


def test_rejection_literal_certain_cases():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    q = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])
    # t1=1 has p/q = 1: accepted; t2=1 has p=0: rejected, correction from norm(max(0,p-q)) = [0,0,1]
    v = verify_rejection([1, 1], q, p, _g(0))
    assert (v.accepted, v.token) == (1, 2)
    # all accepted: bonus from p[2] = one-hot 0
    v = verify_rejection([1, 2], torch.tensor([[0, 1.0, 0], [0, 0, 1.0]]), p, _g(0))
    assert (v.accepted, v.token) == (2, 0)


def test_point_mass_literal_certain_cases():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5], [0.0, 0.0, 1.0]])
    v = verify_point_mass([1, 1], p, lambda i: _g(i))  # p[1][1] = 0: rejected, correction from {0, 2}
    assert v.accepted == 1 and v.token in (0, 2)
    v = verify_point_mass([1], p[:2], lambda i: _g(i))  # bonus from p[1]
    assert v.accepted == 1 and v.token in (0, 2)


def test_point_mass_commits_each_rows_own_draw_whatever_was_proposed():
    """Row i's token comes from row i's stream alone: any proposal commits the same tokens as
    the empty one, round after round (what makes a seeded generation independent of its rounds)."""
    p = torch.softmax(torch.randn(4, 50, generator=_g(1)), -1)
    own = [verify_point_mass([], p[i:i + 1], lambda _, i=i: _g(100 + i)).token for i in range(4)]
    for proposal in ([own[0], own[1], 7], [own[0], 3, 3], [9, 9, 9], own[:3]):
        v = verify_point_mass(proposal, p, lambda i: _g(100 + i))
        assert proposal[:v.accepted] == own[:v.accepted] and v.token == own[v.accepted]


P = torch.tensor([0.05, 0.4, 0.1, 0.3, 0.15])
Q = torch.tensor([0.3, 0.1, 0.3, 0.2, 0.1])


def _first_token_counts(fn, n=6000):
    g = _g(123)
    counts = torch.zeros(5)
    for _ in range(n):
        t = int(torch.multinomial(Q, 1, generator=g))
        v = fn(t, g)
        first = t if v.accepted >= 1 else v.token
        counts[first] += 1
    return counts


@pytest.mark.parametrize("mode", ["rejection", "point-mass"])
def test_first_token_is_distributed_as_p(mode):
    p = torch.stack([P, P])
    if mode == "rejection":
        fn = lambda t, g: verify_rejection([t], Q.unsqueeze(0), p, g)  # noqa: E731
    else:
        fn = lambda t, g: verify_point_mass([t], p, lambda i: g)  # noqa: E731
    counts = _first_token_counts(fn)
    chi = stats.chisquare(counts.numpy(), (P * counts.sum()).numpy())
    assert chi.pvalue > 1e-3, (counts, chi)
