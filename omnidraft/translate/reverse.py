"""Reverse translation: keep the drafter's own tokenization of the committed text in step with
the target's accepted tokens, re-tokenising only a short look-behind window so tokens that merge
across the boundary come out right; also learns unseen n-grams (OmniDraft Alg. 1, line 19).

Knows byte tables and the drafter tokenizer; the drafter's KV cache is rolled back elsewhere
(CausalLM.sync keeps the longest common prefix).
"""

from __future__ import annotations

from omnidraft.translate.align import aligned_segments
from omnidraft.translate.ngram import NgramCache
from omnidraft.translate.vocab import VocabMap


def _utf8_complete(buf: bytes) -> int:
    """Length of the longest prefix of ``buf`` that ends on a UTF-8 character boundary."""
    n = len(buf)
    for back in range(1, min(4, n) + 1):
        b = buf[n - back]
        if b & 0xC0 == 0x80:  # continuation byte: keep looking for the lead byte
            continue
        need = 1 if b < 0x80 else 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4
        return n if back >= need else n - back
    return n


class DraftContext:
    """The drafter-side token ids for prompt + generated text.

    ``prompt_ids``: the drafter's encoding of the prompt (fixed). ``gen_ids``: the drafter's
    tokenization of the generated text's complete UTF-8 prefix; a trailing partial character
    waits in ``tail`` until the next tokens complete it.
    """

    def __init__(self, draft_tok, vmap: VocabMap, prompt_ids: list[int], lookbehind: int = 8):
        self.tok = draft_tok
        self.vmap = vmap
        self.prompt_ids = list(prompt_ids)
        self.gen_ids: list[int] = []
        self.tail = b""
        self.lookbehind = lookbehind

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.gen_ids

    def _bytes(self, ids: list[int]) -> bytes:
        table = self.vmap.draft_bytes
        return b"".join(table[i] or b"" for i in ids)

    def append_target(self, target_ids: list[int]) -> None:
        """Extend with accepted target tokens (special tokens carry no text)."""
        table = self.vmap.target_bytes
        data = self.tail + b"".join(table[t] or b"" for t in target_ids if t < len(table))
        cut = _utf8_complete(data)
        text_bytes, self.tail = data[:cut], data[cut:]
        if not text_bytes:
            return
        keep = max(0, len(self.gen_ids) - self.lookbehind)
        window = self._bytes(self.gen_ids[keep:])
        while keep > 0 and window and window[0] & 0xC0 == 0x80:  # start on a character boundary
            keep -= 1
            window = self._bytes(self.gen_ids[keep:])
        text = (window + text_bytes).decode("utf-8", errors="replace")
        self.gen_ids = self.gen_ids[:keep] + self.tok.encode(text, add_special_tokens=False)


LEARN_WINDOW = 24  # target tokens re-aligned after each drafting round


def learn_ngrams(cache: NgramCache, ctx: DraftContext, target_ids: list[int], window: int = LEARN_WINDOW) -> int:
    """Learn, in context, the segments where the two tokenizations of the committed text differ.

    ``target_ids``: the target's generated tokens so far. The last ``window`` of them and the
    drafter tokens spelling the same bytes are split at their common boundaries; each segment
    that is not a one-to-one direct mapping becomes an entry (drafter run -> target run).
    """
    vm = ctx.vmap
    tids = [t for t in target_ids[-window:] if vm.target_bytes[t]]
    dids = [d for d in ctx.gen_ids[-window:] if vm.draft_bytes[d]]
    tlens = [len(vm.target_bytes[t]) for t in tids]
    dlens = [len(vm.draft_bytes[d]) for d in dids]
    # the drafter side stops before a held-back partial character: trim the target side to match
    excess = len(ctx.tail)
    while excess > 0 and tids:
        if tlens[-1] > excess:
            return 0  # the boundary falls inside a target token; learn next round
        excess -= tlens.pop()
        tids.pop()
    added = 0
    for dseg, tseg in aligned_segments(dids, dlens, tids, tlens):
        if len(dseg) == 1 and len(tseg) == 1:
            continue
        added += cache.add(dseg, tseg)
    return added
