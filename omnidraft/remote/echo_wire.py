"""llama-cpp-python's OpenAI server as a Wire (remote/wire.py): the prompt is text, and a verify is one
`/v1/completions` request with ``echo`` + ``logprobs``, whose reply holds the top-N log-probabilities
at every prompt position. That server computes them in Python for every prompt position (~0.1 s
each on the 0.5B here), so the pair rarely beats it generating alone (README: when to use which).

What its replies do and do not say, and how each gap is closed:
- The prompt is text, so the engine re-tokenises it. A proposal is cut to its longest prefix whose
  text tokenises back to the same ids (target tokenizer), and every reply's echoed pieces are
  checked against the ids sent. Proposals stop before specials and tokens ending inside a
  character (forcing one cannot report its probability).
- ``top_logprobs[i]`` is the distribution *after* token i (for token i+1) plus an entry for token
  i itself (abetlen/llama-cpp-python#1983); its keys are token texts, so ids sharing a text
  (specials, partial UTF-8) cannot be told apart there. ``Row`` keeps only what is certain: the
  probabilities of ids named unambiguously, and a ceiling on every other id's. A generated token
  is named by its text among whole-character ids (Pieces.whole_ids); an end of generation (the
  API does not name the id) is the tokenizer's EOS id.
- Its log-probabilities are those of the untempered distribution; ``logit_bias`` applies to the
  logits before any other sampler; it applies top-p before temperature.
Knows the completions API as that server speaks it, and the tokenizer; nothing about verification.
"""

from __future__ import annotations

import math
from typing import Iterator

from omnidraft.remote.http import BadReply, JsonClient, RemoteUnavailable
from omnidraft.remote.wire import FORCE, Row, stream_choices

NEUTRAL = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0,
           "frequency_penalty": 0.0, "presence_penalty": 0.0}  # the engine samples the raw softmax


class Pieces:
    """Token texts as llama-cpp-python renders them (bytes decoded with errors ignored, so a token
    ending in part of a character reads like the token without it; specials as ""), and the ids
    of each text."""

    def __init__(self, tok, vocab_size: int):
        from omnidraft.translate.vocab import token_bytes

        table, _ = token_bytes(tok, vocab_size)
        self.text = [b.decode("utf-8", errors="ignore") if b is not None else "" for b in table]
        self.owners: dict[str, list[int]] = {}
        self.whole: dict[str, list[int]] = {}  # text -> ids whose bytes are whole characters
        for i, (t, b) in enumerate(zip(self.text, table)):
            self.owners.setdefault(t, []).append(i)
            if b and b.decode("utf-8", errors="ignore").encode("utf-8") == b:
                self.whole.setdefault(t, []).append(i)

    def whole_ids(self, text: str) -> list[int]:
        """The ids of ``text`` made of whole characters: the only ones llama-cpp-python returns as
        one generated token (it holds back a token ending in part of a character and generates
        on past max_tokens)."""
        return self.whole.get(text, [])

    def sendable(self, i: int) -> bool:
        """A proposal may carry ``i``: whole characters, not a special (whose probability cannot be
        probed: forcing it ends the generation before its log-probability is reported)."""
        return i in self.whole.get(self.text[i], ())

    def id_of(self, text: str) -> int | None:
        """The one id of ``text``, None when it names none or several."""
        ids = self.owners.get(text, [])
        return ids[0] if len(ids) == 1 else None


def read_row(entry: dict | None, pieces: Pieces, given: int) -> Row:
    """One ``top_logprobs`` entry (the distribution after token ``given``) -> a Row.

    The entry holds the top N plus an entry for ``given``'s own text (with the true probability of
    ``given``'s id, written last). A key naming several ids holds the last written of them, so it
    is dropped, and while one is present a hidden id may carry up to the unlisted mass."""
    row = Row()
    if not entry:
        return row
    top: list[float] = []
    for text, logprob in entry.items():
        p = math.exp(float(logprob))
        i = pieces.id_of(text)
        if i is None:
            row.hidden = True
        else:
            row.known[i] = p
        if text != pieces.text[given]:
            top.append(p)
    row.top_min = min(top) if top else 1.0
    return row


class EchoWire:
    """Requests to llama-cpp-python's server at ``http`` serving ``model``, whose tokenizer is ``tok``."""

    engine = "llama-cpp-python"

    def __init__(self, http: JsonClient, model: str, tok, *, eos: int, top_n: int):
        self.http, self.model, self.tok, self.eos, self.top_n = http, model, tok, eos, top_n
        self.pieces = Pieces(tok, len(tok))
        self.bos = tok.bos_token_id
        self.evaluations = 0

    # ------------------------------------------------------------------ text <-> ids
    def _text(self, ids: list[int]) -> str:
        body = ids[1:] if ids and ids[0] == self.bos else ids  # the engine adds its own BOS
        return self.tok.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def expressible(self, ids: list[int]) -> bool:
        again = self.tok(self._text(ids), add_special_tokens=False).input_ids
        lead = [self.bos] if ids and ids[0] == self.bos else []
        return lead + again == list(ids)

    def sendable(self, context: list[int], proposal: list[int]) -> list[int]:
        """Without specials and tokens ending in part of a character (Pieces.sendable), cut to the
        longest prefix whose text re-tokenises."""
        m = 0
        while m < len(proposal) and self.pieces.sendable(proposal[m]):
            m += 1
        while m and not self.expressible(context + proposal[:m]):
            m -= 1
        return proposal[:m]

    # ------------------------------------------------------------------ requests
    def _complete(self, ids: list[int], *, echo: bool, temperature: float, seed: int, logprobs: int,
                  bias: dict[int, float] | None = None, top_p: float = 1.0) -> dict:
        body = {"model": self.model, "prompt": self._text(ids), "max_tokens": 1, "echo": echo,
                "temperature": temperature, "seed": seed, "logprobs": logprobs, **NEUTRAL, "top_p": top_p}
        if bias:
            body["logit_bias"] = {str(i): b for i, b in bias.items()}
        out = self.http.call("POST", "/completions", body)
        self.evaluations += 1
        try:
            choice = out["choices"][0]
            lp = choice["logprobs"]
            if not isinstance(lp["tokens"], list) or not isinstance(lp["top_logprobs"], list):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise BadReply("the OpenAI-API server's completion has no log-probabilities",
                           "serve the model with logits_all (llama-cpp-python: --logits_all true)") from None
        return choice

    def _generated(self, choice: dict, echoed: str = "") -> int:
        """The id of the one token a reply generated (its text follows the ``echoed`` prompt
        text): the one whole-character id of that text (Pieces.whole_ids)."""
        text = choice.get("text")
        if not isinstance(text, str) or not text.startswith(echoed):
            raise BadReply("the OpenAI-API server's echo is not the prompt sent", "check the server")
        piece = text[len(echoed):]
        if not piece and choice.get("finish_reason") == "stop":
            return self.eos
        ids = self.pieces.whole_ids(piece)
        if len(ids) != 1:
            raise RemoteUnavailable(f"the target generated text {piece!r}, which is not one token of its tokenizer",
                                    "the OpenAI API returns texts, not ids; use a local fallback target")
        return ids[0]

    def verify(self, ids: list[int], m: int, *, temperature: float, seed: int) -> tuple[list[Row], int]:
        choice = self._complete(ids, echo=True, temperature=temperature, seed=seed, logprobs=self.top_n)
        lp = choice["logprobs"]
        body = ids[1:] if ids and ids[0] == self.bos else ids
        n = len(body)
        if [self.pieces.text[i] for i in body] != lp["tokens"][:n] or len(lp["top_logprobs"]) < n:
            raise BadReply("the OpenAI-API server tokenised the prompt differently from the target tokenizer",
                           "pass the served model's own tokenizer (--target-tokenizer)")
        first = n - 1 - m  # the echo entry of the last context token
        rows = [read_row(lp["top_logprobs"][first + j], self.pieces, body[first + j]) for j in range(m + 1)]
        return rows, self._generated(choice, self._text(ids))

    def sample(self, ids: list[int], *, temperature: float, top_p: float, seed: int,
               bias: dict[int, float] | None = None, top_n: int = 1) -> tuple[int, Row]:
        choice = self._complete(ids, echo=False, temperature=temperature, seed=seed, logprobs=top_n,
                                bias=bias, top_p=top_p)
        got = self._generated(choice)
        return got, read_row((choice["logprobs"]["top_logprobs"] or [None])[0], self.pieces, got)

    def probe_prob(self, ids: list[int], token: int) -> float:
        """The token forced by logit_bias at temperature 0, its raw log-probability read."""
        choice = self._complete(ids, echo=False, temperature=0.0, seed=0, logprobs=1, bias={token: FORCE})
        forced = choice.get("logprobs", {}).get("token_logprobs") or [None]
        if choice.get("text") != self.pieces.text[token] or forced[0] is None:
            raise BadReply("the OpenAI-API server ignored logit_bias", "check the server")
        return math.exp(float(forced[0]))

    def stream(self, ids: list[int], max_tokens: int, *, temperature: float, top_p: float,
               seed: int | None) -> Iterator[tuple[str, str | None]]:
        body = {"model": self.model, "prompt": self._text(list(ids)), "max_tokens": max_tokens,
                "temperature": temperature, **NEUTRAL, "top_p": top_p, "stream": True}
        if seed is not None:
            body["seed"] = seed
        yield from stream_choices(self.http.events("/completions", body))

