"""How a generation's rounds decide their drafts, from the Session's stopping rules and what the
drafter has: the draft length's k with the drafter's own confidence stop (the default); with
``gamma`` and an acceptance head, the head deciding each draft's length up to K_MAX; with
``priced``, a head and the cost model choosing k, the cost model saying whether a round drafts and
the head, priced by it, how far (pairs/cost.py ``stop_below``). A head rule without a head falls
back to the draft length's k.

Knows SpecConfig and the draft lengths; nothing about models or the Session.
"""

from __future__ import annotations

from dataclasses import replace

from omnidraft.decode.draft_length import K_MAX, CostModelK, DraftLength, FixedK
from omnidraft.propose.config import SpecConfig


def round_rules(cfg: SpecConfig, k: DraftLength, has_head: bool) -> tuple[SpecConfig, DraftLength]:
    """(the stopping rules the rounds run, the draft length they ask) for ``cfg`` with draft length
    ``k``, ``has_head``: the running adapter has an acceptance head."""
    adaptive = cfg.gamma is not None and has_head
    out = cfg if adaptive else replace(cfg, gamma=None)
    if cfg.priced and has_head and isinstance(k, CostModelK) and k.pinned is None:
        return replace(out, stop_below=tuple(k.model.stop_below(k.rates(), k.predicted, k.k_max))), k.reaching()
    return replace(out, priced=False, stop_below=None), FixedK(K_MAX) if adaptive else k
