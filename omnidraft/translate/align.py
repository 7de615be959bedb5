"""Byte alignment of two tokenizations of the same text: the minimal segments between the token
boundaries both share, the unit the n-gram cache learns and the training records are cut into.

Knows token ids and their byte lengths; nothing about vocabularies, caches or models.
"""

from __future__ import annotations

from typing import Sequence


def aligned_segments(draft_ids: Sequence[int], draft_lens: Sequence[int],
                     target_ids: Sequence[int], target_lens: Sequence[int]):
    """Split two tokenizations of the same bytes at their common token boundaries.

    ``*_lens``: byte length of each token. Both sequences must end at the same byte. Yields
    (drafter-id tuple, target-id tuple) for each minimal segment between common boundaries,
    walking back from the shared end (so a ragged start is simply never reached).
    """
    i, j = len(draft_ids), len(target_ids)
    seg_d: list[int] = []
    seg_t: list[int] = []
    dpos = tpos = 0  # bytes consumed from the end on each side
    while i > 0 or j > 0:
        if (dpos <= tpos and i > 0) or j == 0:
            i -= 1
            seg_d.append(draft_ids[i])
            dpos += draft_lens[i]
        else:
            j -= 1
            seg_t.append(target_ids[j])
            tpos += target_lens[j]
        if dpos == tpos and seg_d and seg_t:
            yield tuple(reversed(seg_d)), tuple(reversed(seg_t))
            seg_d, seg_t = [], []
