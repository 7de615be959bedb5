"""The cost model: what a speculative round costs on this machine, and which draft length pays.

A round drafts k tokens (k drafter forwards), verifies them in one target call of k+1 tokens and
commits the accepted prefix plus one target token. With ``v(n)`` the target's time for an
n-token call, ``c`` the drafter's time per token and ``a_i`` the probability that draft position
i is accepted given that positions before it were, the expected tokens per round are
``1 + sum_j prod_{i<=j} a_i`` and the pair's speed ``E[tokens] / (p (v(k+1) + k c + t) + e)`` (t:
the measured translation time per round; p: the machine's pace, rounds without a draft measured
in generations against v; e: what drafted rounds cost beyond the paced timed terms). Plain
decoding runs at ``1 / (p v(1))``, so a choice that only pays on paper is seen not to once rounds
have run, and a machine that slows down slows both alike (a slowdown seen only in plain rounds
does not make drafting look faster); ``choose`` picks the k that maximises the pair's speed and
k = 0 (the target alone) when no k beats plain decoding. A copy from the context costs p v(n + 1).
The drafter's ms per token when it reads committed text in one call (``catchup_ms``) prices its
catch-up (decode/draft_length.py decides with it).
A prompt read computes the last position's logits only, so it is priced from a timed read
(``read_ms``), not from the verify calls, whose every row pays the LM head.

Timings come from pairs/timing.py; a pair's model is kept by pairs/cost_store.py. Knows the
arithmetic of rounds; nothing about models, tokenizers, strategies or files.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

MARGIN = 1.05  # speculate only when predicted >= 5% faster than the target alone (estimates err)
ROUND_WEIGHT = 0.05  # a round's weight in the running estimates of the pace and the drafted rounds' extra
PREFILL_WEIGHT = 0.2  # a prompt read's weight in the running estimate of prefill / its timed price
DECODE_WEIGHT = 0.2  # a generation's weight in the running estimate of decoding time / its prediction
# (a kind of work's first generations weigh 1/2, 1/3, 1/4 against the route's estimate it starts from)
DECODE_MIN_TOKENS = 8  # a generation shorter than this says too little about decoding to be folded in



@dataclass
class CostModel:
    """v(n) in ms by call width, the drafter's ms per token, translation ms per round, and the
    drafter's ms per token when it reads committed text in one call (its catch-up), and the
    target's ms per prompt id read in one call of the widest width (``read_ms``: the last row's
    logits only; 0 where a model was saved without it), all timed call by call; and, learnt from
    the rounds generations run (``observe_round``), the machine's ``pace`` (rounds that did not
    draft, the target alone and copies, against their timed call: a machine busier or slower than
    when it was timed, the loop) and what a drafted round costs beyond its paced timed terms
    (``drafted_extra_ms``: verification, reverse translation, n-gram learning, the drafter's
    rollback); and how a prompt read compares with its price from the timed calls
    (``observe_prefill``: a busier machine, prompts longer than the read timed); and how a
    generation's decoding compares with its prediction from drafts (``observe_decode``: copies
    from the context, which only the work itself supplies), over every generation
    (``decode_scale``) and by kind of work (``decode_scales``: kind -> [scale, generations]; an
    edit of pasted code copies far more than an answer to a short question)."""

    verify_ms: dict[int, float]
    drafter_ms: float
    translate_ms: float = 0.0
    catchup_ms: float = 0.0
    read_ms: float = 0.0
    drafted_extra_ms: float = 0.0
    pace: float = 1.0
    prefill_scale: float = 1.0
    decode_scale: float = 1.0
    decode_scales: dict[str, list[float]] = field(default_factory=dict)

    def retimed(self, timed: "CostModel") -> "CostModel":
        """This model on a new timing of the target (``timed``'s v(n) and prompt read): what was
        learnt against the old timing (the pace, the drafted rounds' extra, the prefill scale)
        starts over; the drafter's terms and the decode scales (decoding against its prediction,
        copies mostly) stay."""
        return replace(self, verify_ms=timed.verify_ms, read_ms=timed.read_ms, drafted_extra_ms=0.0, pace=1.0,
                       prefill_scale=1.0, decode_scales={k: list(v) for k, v in self.decode_scales.items()})

    def v(self, n: int) -> float:
        """v(n), linearly interpolated between measured widths (extrapolated past the widest)."""
        ws = sorted(self.verify_ms)
        if n in self.verify_ms:
            return self.verify_ms[n]
        if len(ws) == 1:
            return self.verify_ms[ws[0]] * n / ws[0]
        below = [w for w in ws if w < n]
        above = [w for w in ws if w > n]
        if not below:
            lo, hi = ws[0], ws[1]
        elif not above:  # past the widest: the slope of the last two points
            lo, hi = ws[-2], ws[-1]
        else:
            lo, hi = below[-1], above[0]
        slope = (self.verify_ms[hi] - self.verify_ms[lo]) / (hi - lo)
        return self.verify_ms[lo] + slope * (n - lo)

    @staticmethod
    def expected_tokens(accept: list[float], k: int) -> float:
        """Tokens committed per round with k drafted: 1 + sum_j prod_{i<=j} a_i (a_i for i past
        the measured positions: the last measured rate)."""
        total, run = 1.0, 1.0
        for i in range(k):
            a = accept[min(i, len(accept) - 1)] if accept else 0.0
            run *= a
            total += run
        return total

    def tokens_per_s(self, accept: list[float], k: int) -> float:
        return 1e3 * self.expected_tokens(accept, k) / self.spent_ms(k + 1, k)

    def round_ms(self, width: int, forwards: int, read: int = 0) -> float:
        """A round's ms by the timed terms: a ``width``-token verify call, ``forwards`` drafter
        forwards with translation (none: no translation) after reading ``read`` committed tokens."""
        if not forwards:
            return self.v(width)
        return self.v(width) + forwards * self.drafter_ms + self.translate_ms + read * self.catchup_ms

    def spent_ms(self, width: int, forwards: int) -> float:
        """A round's predicted wall ms: ``round_ms`` at the machine's pace, and a drafted round's
        extra cost."""
        return self.pace * self.round_ms(width, forwards) + (self.drafted_extra_ms if forwards else 0.0)

    def observe_round(self, width: int, forwards: int, read: int, seconds: float) -> None:
        """Fold a round's measured wall time in: a round without a draft into the ``pace`` (its
        time over ``round_ms``), a drafted one into ``drafted_extra_ms`` (its gap to the paced
        ``round_ms``); each bounded to [1/2, 3] times the paced round so one stall (a neighbour,
        a page fault) does not swing the estimate."""
        modeled = self.round_ms(width, forwards, read)
        ratio = min(max(seconds * 1e3 / modeled, self.pace / 2), 3 * self.pace)
        if forwards:
            gap = (ratio - self.pace) * modeled
            self.drafted_extra_ms = (1 - ROUND_WEIGHT) * self.drafted_extra_ms + ROUND_WEIGHT * gap
        else:
            self.pace = (1 - ROUND_WEIGHT) * self.pace + ROUND_WEIGHT * ratio

    def timed_prefill_ms(self, n: int) -> float:
        """ms to read ``n`` prompt ids by the timed calls: past the widest timed width w, n ids at
        ``read_ms`` each; up to it v(n) less the LM-head rows a read does not compute (the
        widest width's all-rows call against its read: (v(w) - w * read_ms) / (w - 1) a row),
        never under n * read_ms. Without ``read_ms``, v(w) / w stands in for it (no rows less)."""
        if n <= 0:
            return 0.0
        widest = max(self.verify_ms)
        per_id = self.read_ms or self.verify_ms[widest] / widest
        if n > widest:
            return n * per_id
        head = (self.verify_ms[widest] - widest * per_id) / (widest - 1) if widest > 1 else 0.0
        return max(self.v(n) - (n - 1) * head, n * per_id)

    def prefill_ms(self, n: int) -> float:
        """``timed_prefill_ms`` times what prompt reads have measured against it."""
        return self.prefill_scale * self.timed_prefill_ms(n)

    def observe_prefill(self, n: int, seconds: float) -> None:
        """Fold a prompt read of ``n`` ids that took ``seconds`` into ``prefill_scale`` (each read's
        ratio bounded to [1/4, 4]: one stall does not swing it)."""
        if n <= 0:
            return
        ratio = min(max(seconds * 1e3 / self.timed_prefill_ms(n), 0.25), 4.0)
        self.prefill_scale = (1 - PREFILL_WEIGHT) * self.prefill_scale + PREFILL_WEIGHT * ratio

    def decode_scale_for(self, kind: str) -> float:
        """The decode scale measured on ``kind`` of work; one never seen: ``decode_scale``."""
        seen = self.decode_scales.get(kind)
        return seen[0] if seen else self.decode_scale

    def observe_decode(self, predicted_tokens_per_s: float, tokens: int, seconds: float, kind: str = "",
                       least: float = 0.0) -> None:
        """Fold a generation that decoded ``tokens`` in ``seconds`` where ``predicted_tokens_per_s``
        (from drafts alone) was predicted into ``decode_scale``, its time against the prediction (each
        ratio bounded to [1/4, 4]; generations under DECODE_MIN_TOKENS tokens are left out), and into
        ``kind``'s scale: its first generations move it from ``decode_scale`` by 1/2, 1/3, 1/4, then
        by DECODE_WEIGHT (a kind of work is told apart in a few generations), never by less than
        ``least`` (a generation run to check a price suspected stale: pairs/router.py)."""
        if tokens < DECODE_MIN_TOKENS or predicted_tokens_per_s <= 0:
            return
        ratio = min(max(seconds * predicted_tokens_per_s / tokens, 0.25), 4.0)
        if kind:
            scale, n = self.decode_scales.get(kind, (self.decode_scale, 0))
            weight = max(DECODE_WEIGHT, 1 / (n + 2), least)
            self.decode_scales[kind] = [(1 - weight) * scale + weight * ratio, n + 1]
        self.decode_scale = (1 - DECODE_WEIGHT) * self.decode_scale + DECODE_WEIGHT * ratio

    def copy_lengths(self, available: int) -> list[int]:
        """Copy lengths up to ``available`` whose verify width (n + 1) was measured: an
        interpolated width could cost the next step's price (see WIDTHS)."""
        return [w - 1 for w in sorted(self.verify_ms) if 1 <= w - 1 <= available]

    def copied_tokens_per_s(self, accept: list[float], n: int) -> float:
        """A round verifying ``n`` ids copied from the context: no drafter, no translation."""
        return 1e3 * self.expected_tokens(accept, n) / self.spent_ms(n + 1, 0)

    def stop_below(self, accept: list[float], rate: float, k_max: int = 8) -> list[float]:
        """Per draft position n = 1..k_max - 1, the chance that all n drafts so far are accepted
        below which drafting on no longer pays (an acceptance head's running product P is compared
        with it; after k_max the draft ends anyway). Drafting on to m > n adds c_n * S(n, m) expected
        tokens (c_n: that chance; S: the expected run past n at the per-position rates ``accept``)
        and costs ΔT(n, m) ms (m - n drafter forwards and the wider verify call, never less than the
        narrower's); at the long-run ``rate`` (tokens/s) it pays when c_n * S > rate * ΔT / 1000, so
        the threshold is the least rate * ΔT / (1000 * S) over m (no m pays: 1, stop)."""
        def a(i: int) -> float:  # 0-based position i's rate (past the measured: the last one)
            return accept[min(i, len(accept) - 1)] if accept else 0.0

        out = []
        for n in range(1, k_max):
            best, run, gain = 1.0, 1.0, 0.0
            for m in range(n + 1, k_max + 1):
                run *= a(m - 1)
                gain += run
                # a wider call never costs less (measured widths can dip: noise, or a kernel's tile)
                extra = self.pace * ((m - n) * self.drafter_ms + max(0.0, self.v(m + 1) - self.v(n + 1)))
                if gain > 0:
                    best = min(best, rate * extra / (1e3 * gain))
            out.append(best)
        return out

    def choose(self, accept: list[float], k_max: int = 8, margin: float = MARGIN) -> tuple[int, float]:
        """(the best k in 0..k_max, its predicted tokens/s); 0 = plain decoding wins, also when
        the best k is predicted less than ``margin`` times faster than it."""
        best = max(range(1, k_max + 1), key=lambda k: self.tokens_per_s(accept, k))
        if self.tokens_per_s(accept, best) < margin * self.tokens_per_s(accept, 0):
            best = 0
        return best, self.tokens_per_s(accept, best)

    def to_dict(self) -> dict:
        return asdict(self)
