"""Two Sessions of one pair (an app's and the CLI's, two processes, two routes' files) keep one
cost file: each saves what it learnt since it last read or wrote the file (``base``) on top of what
the file holds now (``theirs``), so neither wipes out the other's acceptance counts and learnt
prices. A three-way merge of saved records ({"model", "reached", "accepted", "on"}, pairs/cost_store.py
``CostRecord``):

- acceptance counts (per position, reached and accepted): the file's plus this Session's increase
  since ``base`` (never below 0: a count this Session halved as its evidence faded gives back at
  most what it held);
- learnt terms (the pace, the drafted rounds' extra ms, the prefill and decode scales, each kind of
  work's decode scale and its generations): the file's moved by this Session's own move since
  ``base``; a kind only one side has seen is that side's; one both saw first since ``base``, their
  generation-weighted mean;
- the timed terms (v(n), the drafter's, translation's and the prompt read's ms): this Session's
  where it timed again since ``base``, and then its whole model (what was learnt against the old
  timing starts over, CostModel.retimed); else the file's.

Knows the record's layout; nothing about files, locks or what the terms mean to the cost model.
"""

from __future__ import annotations

TIMED = ("verify_ms", "drafter_ms", "translate_ms", "catchup_ms", "read_ms")
LEARNT = ("drafted_extra_ms", "pace", "prefill_scale", "decode_scale")
SCALES = ("pace", "prefill_scale", "decode_scale")  # ratios: kept in [1/4, 4] as each update keeps them
LOW, HIGH = 0.25, 4.0


def merge(base: dict, mine: dict, theirs: dict) -> dict:
    """The record to write: ``mine`` (this Session's, read from ``base``) merged into ``theirs``
    (what the file holds now), as the module docstring says."""
    model = _model(base["model"], mine["model"], theirs["model"])
    reached, accepted = (_counts(base[key], mine[key], theirs.get(key, [])) for key in ("reached", "accepted"))
    return {"model": model, "reached": reached, "accepted": [min(a, n) for a, n in zip(accepted, reached)],
            "on": mine["on"]}


def _model(base: dict, mine: dict, theirs: dict) -> dict:
    if any(mine.get(key) != base.get(key) for key in TIMED):  # timed again here: this timing's model
        return mine
    out = dict(theirs)
    for key in LEARNT:
        moved = theirs.get(key, 0.0) + mine.get(key, 0.0) - base.get(key, 0.0)
        out[key] = min(max(moved, LOW), HIGH) if key in SCALES else moved
    out["decode_scales"] = _scales(base.get("decode_scales", {}), mine.get("decode_scales", {}),
                                   theirs.get("decode_scales", {}))
    return out


def _scales(base: dict, mine: dict, theirs: dict) -> dict:
    """kind -> [scale, generations], merged per kind."""
    out = dict(theirs)
    for kind, (scale, n) in mine.items():
        was, now = base.get(kind), theirs.get(kind)
        if [scale, n] == was:  # this Session did not see the kind since base
            continue
        if now is None:
            out[kind] = [scale, n]
        elif was is None:  # both saw it first since base
            out[kind] = [(scale * n + now[0] * now[1]) / max(n + now[1], 1), n + now[1]]
        else:
            out[kind] = [min(max(now[0] + scale - was[0], LOW), HIGH), now[1] + n - was[1]]
    return out


def _counts(base: list[float], mine: list[float], theirs: list[float]) -> list[float]:
    size = max(len(base), len(mine), len(theirs))
    pad = lambda xs: list(xs) + [0.0] * (size - len(xs))  # noqa: E731
    return [max(t + m - b, 0.0) for b, m, t in zip(pad(base), pad(mine), pad(theirs))]
