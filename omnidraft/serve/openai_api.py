"""A cloud target on an OpenAI-compatible completions server, with no server code of ours:
each verify is one `/v1/completions` request whose prompt is the committed context plus the
proposal, asking for one generated token and the top-N log-probabilities at every prompt position
(``echo`` + ``logprobs``, llama-cpp-python's server). The engine's prefix cache keeps the resent
context cheap to evaluate, but that server's echo path costs ~0.13 s per prompt position in Python
(README: when to use which).

What such a reply does and does not say, and how each gap is closed exactly:
- The prompt is text, so the engine re-tokenises it. A proposal is cut to its longest prefix whose
  text tokenises back to the same ids (target tokenizer), and every reply's echoed pieces are
  checked against the ids sent. Proposals stop before specials and tokens ending inside a
  character (forcing one cannot report its probability). A context that no text expresses ends
  the remote generation at the next verify, its last token committed (RemoteUnavailable: a
  FallbackTarget continues locally from it).
- llama-cpp-python's ``top_logprobs[i]`` is the distribution *after* token i (for token i+1) plus
  an entry for token i itself (abetlen/llama-cpp-python#1983); its keys are token texts, so ids
  sharing a text (specials, partial UTF-8) cannot be told apart there. ``Row`` keeps only what is
  certain: the probabilities of ids named unambiguously, and a ceiling on every other id's. A
  generated token is named by its text among whole-character ids (Pieces.whole_ids).
- Greedy: a row's argmax is certain when its best known id reaches the ceiling; else one probe
  request (temperature 0 at that prefix) names it. The bonus is the verify request's own
  generated token (temperature 0). An end of generation (the API does not name the id) is the
  tokenizer's EOS id.
- Sampling at temperature 1 with top-p 1 (the engine's log-probabilities are those of the
  untempered distribution): point-mass verification accepts d with probability p(d); an unlisted
  d is rejected outright when the uniform draw is above the row's ceiling, else a probe
  (``logit_bias`` +100 on d, temperature 0) reads p(d) exactly. The residual after a rejection is
  sampled by the engine with ``logit_bias`` -100 on the rejected token (the bias applies to the
  logits before any other sampler; top-k, top-p, min-p and penalties are all disabled). The bonus
  is the verify request's own sample.
- Sampling at any other temperature or top-p, whose law no reply states: the engine samples each
  position itself (one request per position, in order, no echo, the prefix cached by the engine),
  and the draft is accepted while the engine's sample equals it. That is the point-mass rule with
  the engine's own sampler: the sample equals d with probability p(d), and a sample that differs
  is distributed as the target's law without d, which is the residual. Every committed token is a
  sample of the engine at those settings (llama-cpp-python applies top-p before temperature), so
  the output is distributed as the engine's own sampling; it costs one request per committed token.
Knows the completions API and the tokenizer; nothing about drafters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Generator

import torch

from omnidraft.decode.sampling import SamplingConfig
from omnidraft.decode.text import drained
from omnidraft.decode.verify import Verdict
from omnidraft.errors import OmniDraftError
from omnidraft.serve.http import BadReply, JsonClient, RemoteUnavailable

TOP_N = 20  # log-probabilities asked per position
FORCE, BAN = 100.0, -100.0  # logit biases: e^-100 is below float32's resolution of any probability
NEUTRAL = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0,
           "frequency_penalty": 0.0, "presence_penalty": 0.0}  # the engine samples the raw softmax


@dataclass(frozen=True)
class Alone:
    """What the engine generating on its own returned."""

    text: str
    tokens: int  # new tokens (the engine's EOS not counted)
    seconds: float


@dataclass
class Row:
    """What replies establish about one position's target distribution (temperature 1)."""

    known: dict[int, float] = field(default_factory=dict)  # id -> probability, exact
    top_min: float = 1.0  # the least probability among the listed top N
    hidden: bool = False  # a listed text names several ids: one of them may hold unlisted mass

    @property
    def ceiling(self) -> float:
        """No id outside ``known`` has a larger probability."""
        return max(self.top_min, 1.0 - sum(self.known.values())) if self.hidden else self.top_min

    def argmax(self) -> int | None:
        """The most likely id when what is known settles it, else None."""
        if not self.known:
            return None
        best = max(self.known, key=self.known.__getitem__)
        return best if self.known[best] >= self.ceiling else None


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
        p = float(torch.tensor(logprob).exp())
        i = pieces.id_of(text)
        if i is None:
            row.hidden = True
        else:
            row.known[i] = p
        if text != pieces.text[given]:
            top.append(p)
    row.top_min = min(top) if top else 1.0
    return row


class OpenAITarget:
    """Verifies through ``base_url`` (e.g. http://127.0.0.1:8000/v1) serving ``model`` (None: the
    one it lists) whose tokenizer is ``tok``. Satisfies decode/target.py's Target protocol (point-mass mode)."""

    mode = "point-mass"
    needs_q = False

    def __init__(self, base_url: str, token: str, model: str | None, tok, sampling: SamplingConfig, *,
                 eos_ids: set[int], max_length: int = 2048, record_topk: int = 0, top_n: int = TOP_N,
                 timeout: float = 120.0, retries: int = 3, rtt_ms: float = 0.0):
        if record_topk > top_n:
            raise OmniDraftError(f"record_topk {record_topk} exceeds the {top_n} log-probabilities asked")
        self.http = JsonClient(base_url, token, timeout=timeout, retries=retries, rtt_ms=rtt_ms)
        self.model = model or self._served_model()
        self.tok, self.sampling = tok, sampling
        # a law the replies do not state: each position sampled by the engine (the module text)
        self.match = not sampling.greedy and (sampling.temperature != 1.0 or sampling.top_p != 1.0)
        self.eos_ids = set(eos_ids)
        self.eos = tok.eos_token_id if tok.eos_token_id is not None else min(self.eos_ids)
        self.vocab_size = len(tok)
        self.max_length, self.record_topk, self.top_n = max_length, record_topk, top_n
        self.pieces = Pieces(tok, self.vocab_size)
        self.gen = sampling.generator("verify")
        self.bos = tok.bos_token_id
        self.context: list[int] = []
        self.last_rows: tuple[torch.Tensor, torch.Tensor] | None = None
        self.evaluations = 0  # requests that ran the model (each one batched forward)

    def _served_model(self) -> str:
        """The first model the server lists (engines serving one model list exactly it)."""
        try:
            return str(self.http.call("GET", "/models")["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise BadReply("the OpenAI-API server lists no model", "pass --target-model") from None

    # ------------------------------------------------------------------ text <-> ids
    def _text(self, ids: list[int]) -> str:
        body = ids[1:] if ids and ids[0] == self.bos else ids  # the engine adds its own BOS
        return self.tok.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _expressible(self, ids: list[int]) -> bool:
        """The text of ``ids`` tokenises back to ``ids``."""
        again = self.tok(self._text(ids), add_special_tokens=False).input_ids
        lead = [self.bos] if ids and ids[0] == self.bos else []
        return lead + again == list(ids)

    def _sendable(self, proposal: list[int]) -> list[int]:
        """The longest prefix of ``proposal`` whose text re-tokenises, without specials and tokens
        ending in part of a character (Pieces.sendable)."""
        m = 0
        while m < len(proposal) and self.pieces.sendable(proposal[m]):
            m += 1
        while m and not self._expressible(self.context + proposal[:m]):
            m -= 1
        return proposal[:m]

    # ------------------------------------------------------------------ requests
    def _complete(self, ids: list[int], *, echo: bool, temperature: float, bias: dict[int, float] | None = None,
                  logprobs: int | None = None, top_p: float = 1.0) -> dict:
        body = {"model": self.model, "prompt": self._text(ids), "max_tokens": 1, "echo": echo,
                "temperature": temperature, "seed": int(torch.randint(0, 2**31 - 1, (1,), generator=self.gen)),
                "logprobs": self.top_n if logprobs is None else logprobs, **NEUTRAL, "top_p": top_p}
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

    def _probe_argmax(self, prefix: list[int]) -> int:
        return self._generated(self._complete(prefix, echo=False, temperature=0.0, logprobs=1))

    def _probe_prob(self, prefix: list[int], token: int) -> float:
        """p(token | prefix), exact: the token forced by logit_bias, its raw log-probability read."""
        choice = self._complete(prefix, echo=False, temperature=0.0, bias={token: FORCE}, logprobs=1)
        forced = choice.get("logprobs", {}).get("token_logprobs") or [None]
        if choice.get("text") != self.pieces.text[token] or forced[0] is None:
            raise BadReply("the OpenAI-API server ignored logit_bias", "check the server")
        return float(torch.tensor(forced[0]).exp())

    def _residual(self, prefix: list[int], rejected: int) -> int:
        choice = self._complete(prefix, echo=False, temperature=1.0, bias={rejected: BAN}, logprobs=1)
        return self._generated(choice)

    def generate_alone(self, prompt_ids: list[int], max_new_tokens: int) -> Alone:
        """The engine generating on its own (``stream_alone``), read to its end."""
        return drained(self.stream_alone(prompt_ids, max_new_tokens))

    def stream_alone(self, prompt_ids: list[int], max_new_tokens: int) -> Generator[str, None, Alone]:
        """The engine generating on its own at this target's sampling settings, one streamed
        request: the honest baseline of a cloud pair (no per-token round trip), and what a Session
        hands generation to when the pair loses. Its output is the engine's own, so it is exact.
        Yields the text as the engine sends it; returns the whole."""
        t0 = time.perf_counter()
        greedy = self.sampling.greedy
        body = {"model": self.model, "prompt": self._text(list(prompt_ids)), "max_tokens": max_new_tokens,
                "temperature": 0.0 if greedy else self.sampling.temperature, **NEUTRAL,
                "top_p": 1.0 if greedy else self.sampling.top_p, "stream": True}
        if not greedy:
            body["seed"] = int(torch.randint(0, 2**31 - 1, (1,), generator=self.gen))
        text, finish = [], None
        for event in self.http.events("/completions", body):
            try:
                choice = event["choices"][0]
                piece = choice.get("text") or ""
            except (KeyError, IndexError, TypeError, AttributeError):
                raise BadReply("the OpenAI-API server's stream event has no choice text", "check the server") from None
            finish = choice.get("finish_reason") or finish
            if piece:
                text.append(piece)
                yield piece
        whole = "".join(text)
        tokens = max_new_tokens if finish == "length" else len(self.tok(whole, add_special_tokens=False).input_ids)
        return Alone(whole, tokens, time.perf_counter() - t0)

    # ------------------------------------------------------------------ Target protocol
    def start(self, prompt_ids: list[int]) -> None:
        if not prompt_ids:
            raise OmniDraftError("empty prompt")
        if not self._expressible(list(prompt_ids)):
            raise OmniDraftError("the prompt's ids are not the target tokenizer's own tokenisation of their text",
                                 "an OpenAI-API target re-tokenises text; tokenise the prompt with its tokenizer")
        self.context = list(prompt_ids)

    def verify(self, proposal: list[int], q: torch.Tensor | None = None) -> Verdict:
        """One request over context + the sendable part of ``proposal`` (see the module text);
        a cut proposal is verified as far as it was sent."""
        if any(not 0 <= t < self.vocab_size for t in proposal):
            raise ValueError(f"proposal ids must be in 0..{self.vocab_size - 1}")
        if not self._expressible(self.context):  # checked before the next round, so the token that
            # made it so stays committed (dropping it would bias sampling): the fallback goes on from it
            raise RemoteUnavailable("the target's output has no text that tokenises back to it",
                                    "an OpenAI-API target re-tokenises text; use a local fallback target")
        sent = self._sendable(list(proposal))
        ids = self.context + sent
        if len(ids) + 1 > self.max_length:
            raise ValueError(f"a {len(sent)}-token proposal would pass the context window of {self.max_length}")
        if self.match:
            verdict, rows = self._match(sent)
        else:
            greedy = self.sampling.greedy
            choice = self._complete(ids, echo=True, temperature=0.0 if greedy else 1.0)
            rows = self._rows(choice, ids)
            last = self._generated(choice, self._text(ids))
            if greedy and rows[-1].argmax() not in (None, last):
                raise BadReply("the server's prompt log-probabilities are not aligned as llama-cpp-python's",
                               "this engine's echo convention is not supported")
            verdict = self._judge(sent, rows, last)
        self.context += sent[: verdict.accepted] + [verdict.token]
        if self.record_topk:
            self.last_rows = self._top(rows[: verdict.accepted + 1])
        return verdict

    def _rows(self, choice: dict, ids: list[int]) -> list[Row]:
        """The m+1 rows of a verify reply: row j after context + proposal[:j]. Checks the echo."""
        lp = choice["logprobs"]
        body = ids[1:] if ids and ids[0] == self.bos else ids
        n = len(body)
        if [self.pieces.text[i] for i in body] != lp["tokens"][:n] or len(lp["top_logprobs"]) < n:
            raise BadReply("the OpenAI-API server tokenised the prompt differently from the target tokenizer",
                           "pass the served model's own tokenizer (--target-tokenizer)")
        m = len(ids) - len(self.context)
        first = n - 1 - m  # the echo entry of the last context token
        return [read_row(lp["top_logprobs"][first + j], self.pieces, body[first + j]) for j in range(m + 1)]

    def _judge(self, sent: list[int], rows: list[Row], last: int) -> Verdict:
        """Point-mass (or greedy) verification of ``sent`` against ``rows``; ``last`` is the verify
        request's own token after the whole proposal (the bonus)."""
        for j, d in enumerate(sent):
            prefix = self.context + sent[:j]
            row = rows[j]
            if self.sampling.greedy:
                if row.argmax() is None and d not in row.known and row.hidden:
                    row.known[d] = self._probe_prob(prefix, d)  # often settles it (p(d) > 1/2)
                best = row.argmax()
                best = self._probe_argmax(prefix) if best is None else best
                if best != d:
                    return Verdict(j, best)
                continue
            u = float(torch.rand((), generator=self.gen))
            p = row.known.get(d)
            if p is None and u < row.ceiling:
                p = self._probe_prob(prefix, d)
            if p is None or u >= p:
                return Verdict(j, self._residual(prefix, d))
        return Verdict(len(sent), last)

    def _match(self, sent: list[int]) -> tuple[Verdict, list[Row]]:
        """Point-mass verification of ``sent`` with the engine's own sampler (any temperature /
        top-p): position j's sample, drawn at context + sent[:j], accepts sent[j] when equal and
        is the correction when not; after a full match it is the bonus. Returns the verdict and
        the rows of the positions sampled (each reply's top N: distillation's rows)."""
        rows = []
        j = 0
        while True:
            choice = self._complete(self.context + sent[:j], echo=False, temperature=self.sampling.temperature,
                                    top_p=self.sampling.top_p, logprobs=self.top_n if self.record_topk else 1)
            got = self._generated(choice)
            if self.record_topk:
                rows.append(read_row((choice["logprobs"]["top_logprobs"] or [None])[0], self.pieces, got))
            if j == len(sent) or got != sent[j]:
                return Verdict(j, got), rows
            j += 1

    def _top(self, rows: list[Row]) -> tuple[torch.Tensor, torch.Tensor]:
        """[n, record_topk] ids and probabilities of the known entries (padded with probability 0)."""
        k = self.record_topk
        ids = torch.zeros(len(rows), k, dtype=torch.long)
        probs = torch.zeros(len(rows), k)
        for r, row in enumerate(rows):
            best = sorted(row.known.items(), key=lambda kv: -kv[1])[:k]
            for c, (i, p) in enumerate(best):
                ids[r, c], probs[r, c] = i, p
        return ids, probs
