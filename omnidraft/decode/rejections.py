"""Where acceptance is lost (#20): every round's proposal, token by token.

Each proposed target token has a draft position (its index in the proposal) and a kind, read
from how its text lines up with the draft's tokens (the same for token- and string-level
translators): ``same token`` (the text of exactly one draft token: a direct mapping),
``merge`` (the text of two or more whole draft tokens), ``split`` (a boundary falls inside a
draft token), ``special`` (no text: end of turn, EOS). Tokens that came from the n-gram cache
are counted apart as well. A round's first rejected token is blamed on
- ``drafter``: the drafter's text from that token on is not the target's (it drafted otherwise);
- ``translation``: the drafter's text goes on with the target's chosen token, yet the proposed
  target token differs (the drafter was right, the token boundaries or mapping were not);
- ``draft ended``: the drafter's text is a proper prefix of the target's token (the target merges
  further than the draft reached);
- ``special``: the target chose, or was proposed, a token without text.
Draft tokens that were drafted but could not be translated (drafting stops there) are counted as
``untranslated`` per round. Exact for greedy verification (the target's token is its argmax);
under sampling the blame is the sampled token's.

``paired_accepted`` compares two translators on the same drafts: what another translator would
have had accepted from each round's drafts, against the target's greedy output (noise-free:
unpaired runs of two strategies drift apart after their first different round).

Knows Round, Proposal and the VocabMap's byte tables; nothing about models or timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omnidraft.decode.loop import Round
from omnidraft.translate.reverse import _utf8_complete
from omnidraft.translate.vocab import VocabMap

KINDS = ("same token", "merge", "split", "special")
CAUSES = ("drafter", "translation", "draft ended", "special")


@dataclass
class Breakdown:
    """Counters folded from rounds (``add``); ``summary`` gives the rates."""

    vmap: VocabMap
    rounds: int = 0
    empty: int = 0  # rounds that proposed nothing although the drafter drafted
    all_accepted: int = 0  # rounds whose every proposed token was accepted
    untranslated: int = 0  # drafted tokens left out of proposals (no translation)
    cut_rounds: int = 0  # rounds whose drafting ended at an untranslatable token
    position: list[list[int]] = field(default_factory=list)  # [i] -> [proposed, accepted] at position i
    kind: dict[str, list[int]] = field(default_factory=lambda: {k: [0, 0, 0] for k in KINDS})  # proposed,
    #                                                          accepted, first rejections
    cause: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))
    ngram: list[int] = field(default_factory=lambda: [0, 0])  # n-gram cache tokens: proposed, accepted

    def add(self, r: Round) -> None:
        """Fold one round in."""
        prop, n = r.proposal, r.verdict.accepted
        m = len(prop.target_ids)
        self.rounds += 1
        self.untranslated += len(prop.drafts) - prop.consumed
        self.cut_rounds += len(prop.drafts) > prop.consumed
        if m == 0:
            self.empty += bool(prop.drafts)
            return
        self.all_accepted += n == m
        db, tb = self.vmap.draft_bytes, self.vmap.target_bytes
        text = b"".join(db[d] or b"" for d in prop.drafts if d < len(db))  # the drafter's text
        bounds, at = {0: 0}, 0  # byte offset of each draft token boundary -> tokens before it
        for j, d in enumerate(prop.drafts):
            at += len(db[d] or b"") if d < len(db) else 0
            bounds[at] = j + 1
        start = 0
        for i, t in enumerate(prop.target_ids):
            data = tb[t] if t < len(tb) else None
            end = start + len(data or b"")
            if data is None:
                kind = "special"
            elif start in bounds and end in bounds:
                kind = "same token" if bounds[end] - bounds[start] == 1 else "merge"
            else:
                kind = "split"
            if i == len(self.position):
                self.position.append([0, 0])
            self.position[i][0] += 1
            self.kind[kind][0] += 1
            self.ngram[0] += prop.from_cache[i]
            if i < n:
                self.position[i][1] += 1
                self.kind[kind][1] += 1
                self.ngram[1] += prop.from_cache[i]
            elif i == n:
                self.kind[kind][2] += 1
                self.cause[self._cause(kind, text[start:], r.verdict.token)] += 1
            start = end

    def _cause(self, kind: str, text: bytes, wanted: int) -> str:
        """Whose fault the first rejection is: ``text`` is the drafter's text from the rejected
        token on, ``wanted`` the token the target chose there."""
        tb = self.vmap.target_bytes
        want = tb[wanted] if wanted < len(tb) else None
        if want is None or kind == "special":
            return "special"
        if text.startswith(want):
            return "translation"
        if text and want.startswith(text):
            return "draft ended"
        return "drafter"

    def summary(self) -> dict:
        proposed = sum(p for p, _a in self.position)
        rate = (lambda a, p: round(a / p, 4) if p else None)
        return {
            "rounds": self.rounds, "proposed": proposed,
            "accepted": sum(a for _p, a in self.position),
            "acceptance": rate(sum(a for _p, a in self.position), proposed),
            "all_accepted_rounds": self.all_accepted, "empty_rounds": self.empty,
            "cut_rounds": self.cut_rounds, "untranslated_drafts": self.untranslated,
            "by_position": [{"proposed": p, "accepted": a, "acceptance": rate(a, p)} for p, a in self.position],
            "by_kind": {k: {"proposed": p, "accepted": a, "acceptance": rate(a, p), "first_rejections": f}
                        for k, (p, a, f) in self.kind.items()},
            "first_rejection_cause": dict(self.cause),
            "ngram_cache": {"proposed": self.ngram[0], "accepted": self.ngram[1],
                            "acceptance": rate(self.ngram[1], self.ngram[0])},
        }


@dataclass
class _Committed:
    tail: bytes  # committed bytes after the last whole character (what a DraftContext holds back)


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def paired_accepted(rounds: list[Round], prompt_ids: list[int], translator, vmap: VocabMap) -> dict:
    """Tokens the target accepts from each round's proposal and from ``translator``'s translation
    of the same drafts (greedy verification only: the target's choice at every position is its
    output token, so the rounds' committed tokens are the truth both are matched against).

    ``rounds``: one generation's rounds in order; ``prompt_ids``: the target's prompt ids;
    ``translator``: translate(drafts, ctx, history) (translate/token.py, strings.py), given the
    committed target ids and a context holding back a trailing partial character as the
    generation's own DraftContext did. Returns totals: own accepted, other's accepted, rounds,
    rounds where they differ, and rounds where the other accepted more."""
    out = dict.fromkeys(("accepted", "other_accepted", "rounds", "differ", "other_more"), 0)
    generated = [t for r in rounds for t in r.committed]
    tb = vmap.target_bytes
    at, data = 0, b""  # committed tokens so far and their bytes
    for r in rounds:
        if r.proposal.drafts:
            ctx = _Committed(data[_utf8_complete(data):])
            other = translator.translate(r.proposal.drafts, ctx=ctx, history=prompt_ids + generated[:at])
            truth = generated[at:]
            mine, theirs = _common(r.proposal.target_ids, truth), _common(other.target_ids, truth)
            out["accepted"] += mine
            out["other_accepted"] += theirs
            out["rounds"] += 1
            out["differ"] += mine != theirs
            out["other_more"] += theirs > mine
        at += len(r.committed)
        data += b"".join(tb[t] or b"" for t in r.committed if t < len(tb))
    return out
