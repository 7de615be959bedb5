"""Which verification mode a strategy uses when sampling, and whether that is lossless.

Lossless means the committed tokens are distributed exactly as the target's own sampling (same
temperature and top-p); at temperature 0 every strategy is lossless (exact match). When sampling:
- ``point-mass`` is lossless for any proposal mechanism: it needs only the proposed tokens.
- ``rejection`` is lossless only when the q' sent with a proposal is the distribution its tokens
  were actually drawn from: ``tli`` (the drafter renormalised over the shared vocabulary, pushed
  through the direct map) and ``slrs`` (its string distribution psi). ``omnidraft``'s mapping rule
  (2), ``dtw``'s transferred probabilities and ``slem``'s placeholder rows are approximations,
  available only when asked for by name.
Against a remote target the default is ``point-mass`` for every strategy: it sends nothing but
the proposal, where q' rows would cost up to megabytes per round.
Knows mode names; what a strategy promises comes from the registry (propose/registry.py).
"""

from __future__ import annotations

from omnidraft.sampling import SamplingConfig
from omnidraft.errors import OmniDraftError
from omnidraft.propose.registry import get

VERIFY_MODES = ("rejection", "point-mass")


def default_verify_mode(strategy: str, *, remote: bool = False) -> str:
    """The lossless mode a strategy verifies with when none is asked for."""
    return "rejection" if get(strategy).exact_q and not remote else "point-mass"


def check_verify_mode(mode: str | None) -> None:
    if mode is not None and mode not in VERIFY_MODES:
        raise OmniDraftError(f"unknown verify mode {mode!r}", f"choose one of {', '.join(VERIFY_MODES)}")


def is_lossless(strategy: str, mode: str, sampling: SamplingConfig) -> bool:
    """Whether ``strategy`` verified in ``mode`` reproduces the target's distribution exactly."""
    return sampling.greedy or mode == "point-mass" or get(strategy).exact_q
