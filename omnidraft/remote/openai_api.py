"""A cloud target on a serving engine's API, with no server code of ours: each verify is one
request whose prompt is the committed context plus the proposal, asking for one generated token and
the top-N log-probabilities at every proposal position. The engine's prefix cache keeps the resent
context cheap. How each engine carries that is a Wire (remote/wire.py): llama-cpp-python's echoed
text (remote/echo_wire.py), vLLM's ``prompt_logprobs`` and SGLang's ``/generate`` (remote/id_wires.py),
chosen by what the server's ``/models`` says it is (``owned_by``) unless named.

How verification stays exact with what replies say:
- Greedy: a row's argmax is certain when its best known id reaches the ceiling; else one probe
  request (temperature 0 at that prefix) names it. The bonus is the verify request's own
  generated token (temperature 0).
- Sampling at temperature 1 with top-p 1 (the engines' log-probabilities are those of the
  untempered distribution): point-mass verification accepts d with probability p(d); an unlisted
  d is rejected outright when the uniform draw is above the row's ceiling, else a probe reads p(d)
  exactly. The residual after a rejection is sampled by the engine with ``logit_bias`` -100 on the
  rejected token (at temperature 1 with every other sampler disabled the bias's place in the
  sampler chain does not matter). The bonus is the verify request's own sample.
- Sampling at any other temperature or top-p, whose law no reply states: the engine samples each
  position itself (one request per position, in order, the prefix cached by the engine), and the
  draft is accepted while the engine's sample equals it. That is the point-mass rule with the
  engine's own sampler: the sample equals d with probability p(d), and a sample that differs is
  distributed as the target's law without d, which is the residual. Every committed token is a
  sample of the engine at those settings, so the output is distributed as the engine's own
  sampling; it costs one request per committed token.
- A context the wire cannot send (text wires: no text tokenises back to it) ends the remote
  generation at the next verify, its last token committed (RemoteUnavailable: a FallbackTarget
  continues locally from it).
Knows verification over a Wire; nothing about drafters or any engine's reply format.
"""

from __future__ import annotations

import time
from typing import Generator

import torch

from omnidraft.sampling import SamplingConfig
from omnidraft.decode.text import Alone, drained
from omnidraft.decode.verify import Verdict
from omnidraft.errors import OmniDraftError
from omnidraft.remote.http import BadReply, JsonClient, RemoteUnavailable
from omnidraft.remote.wire import BAN, ENGINES, TOP_N, Row, Wire


class OpenAITarget:
    """Verifies through ``base_url`` (e.g. http://127.0.0.1:8000/v1) serving ``model`` (None: the
    one it lists) whose tokenizer is ``tok``, speaking ``engine`` (one of ENGINES; None: what the
    server's /models says). Satisfies decode/target.py's Target protocol (point-mass mode)."""

    mode = "point-mass"
    needs_q = False

    def __init__(self, base_url: str, token: str, model: str | None, tok, sampling: SamplingConfig, *,
                 eos_ids: set[int], max_length: int = 2048, top_n: int = TOP_N,
                 timeout: float = 120.0, retries: int = 3, rtt_ms: float = 0.0, engine: str | None = None):
        if engine is not None and engine not in ENGINES:
            raise OmniDraftError(f"unknown engine {engine!r}", f"use one of {', '.join(ENGINES)}")
        self.http = JsonClient(base_url, token, timeout=timeout, retries=retries, rtt_ms=rtt_ms)
        listed, owner = self._served_model() if model is None or engine is None else (model, "")
        self.model = model or listed
        self.tok, self.sampling = tok, sampling
        # a law the replies do not state: each position sampled by the engine (the module text)
        self.match = not sampling.greedy and (sampling.temperature != 1.0 or sampling.top_p != 1.0)
        self.eos_ids = set(eos_ids)
        self.eos = tok.eos_token_id if tok.eos_token_id is not None else min(self.eos_ids)
        self.vocab_size = len(tok)
        self.max_length, self.top_n = max_length, top_n
        self.record_topk = 0  # this generation's (start): at most the top_n log-probabilities asked
        self.wire: Wire = self._wire(engine or owner, base_url, token, timeout, retries, rtt_ms)
        self.gen = sampling.generator("verify")
        self.context: list[int] = []
        self.last_rows: tuple[torch.Tensor, torch.Tensor] | None = None

    def _served_model(self) -> tuple[str, str]:
        """The first model the server lists (engines serving one model list exactly it) and who
        the server says owns it (vLLM: "vllm", SGLang: "sglang", llama-cpp-python: "me")."""
        try:
            first = self.http.call("GET", "/models")["data"][0]
            return str(first["id"]), str(first.get("owned_by", ""))
        except (KeyError, IndexError, TypeError, AttributeError):
            raise BadReply("the OpenAI-API server lists no model", "pass --target-model") from None

    def _wire(self, engine: str, base_url: str, token: str, timeout: float, retries: int, rtt_ms: float) -> Wire:
        from omnidraft.remote.echo_wire import EchoWire
        from omnidraft.remote.id_wires import SglangWire, VllmWire

        if engine == "vllm":
            return VllmWire(self.http, self.model, eos=self.eos, top_n=self.top_n)
        if engine == "sglang":
            root = JsonClient(base_url.rstrip("/").removesuffix("/v1"), token, timeout=timeout, retries=retries,
                              rtt_ms=rtt_ms)
            return SglangWire(self.http, root, self.model, eos=self.eos, top_n=self.top_n)
        return EchoWire(self.http, self.model, self.tok, eos=self.eos, top_n=self.top_n)

    @property
    def evaluations(self) -> int:
        """Requests that ran the model (each one batched forward)."""
        return self.wire.evaluations

    def _seed(self) -> int:
        return int(torch.randint(0, 2**31 - 1, (1,), generator=self.gen))

    def describe(self) -> dict:
        """What produced a generation the engine ran alone (a Result names it)."""
        return {"name": "openai-api", "url": self.http.url, "model": self.model}

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
        text, finish = [], None
        for piece, end in self.wire.stream(list(prompt_ids), max_new_tokens,
                                           temperature=0.0 if greedy else self.sampling.temperature,
                                           top_p=1.0 if greedy else self.sampling.top_p,
                                           seed=None if greedy else self._seed()):
            finish = end or finish
            if piece:
                text.append(piece)
                yield piece
        whole = "".join(text)
        tokens = max_new_tokens if finish == "length" else len(self.tok(whole, add_special_tokens=False).input_ids)
        return Alone(whole, tokens, time.perf_counter() - t0)

    # ------------------------------------------------------------------ Target protocol
    def start(self, prompt_ids: list[int], record_topk: int = 0) -> None:
        """``record_topk``: clipped to the ``top_n`` log-probabilities each request asks for."""
        self.record_topk, self.last_rows = min(record_topk, self.top_n), None
        if not prompt_ids:
            raise OmniDraftError("empty prompt")
        if not self.wire.expressible(list(prompt_ids)):
            raise OmniDraftError("the prompt's ids are not the target tokenizer's own tokenisation of their text",
                                 "an OpenAI-API target re-tokenises text; tokenise the prompt with its tokenizer")
        self.context = list(prompt_ids)

    def verify(self, proposal: list[int], q: torch.Tensor | None = None) -> Verdict:
        """One request over context + the sendable part of ``proposal`` (see the module text);
        a cut proposal is verified as far as it was sent."""
        if any(not 0 <= t < self.vocab_size for t in proposal):
            raise ValueError(f"proposal ids must be in 0..{self.vocab_size - 1}")
        if not self.wire.expressible(self.context):  # checked before the next round, so the token that
            # made it so stays committed (dropping it would bias sampling): the fallback goes on from it
            raise RemoteUnavailable("the target's output has no text that tokenises back to it",
                                    "an OpenAI-API target re-tokenises text; use a local fallback target")
        sent = self.wire.sendable(self.context, list(proposal))
        ids = self.context + sent
        if len(ids) + 1 > self.max_length:
            raise ValueError(f"a {len(sent)}-token proposal would pass the context window of {self.max_length}")
        if self.match:
            verdict, rows = self._match(sent)
        else:
            greedy = self.sampling.greedy
            rows, last = self.wire.verify(ids, len(sent), temperature=0.0 if greedy else 1.0, seed=self._seed())
            if greedy and rows[-1].argmax() not in (None, last):
                raise BadReply(f"the server's prompt log-probabilities are not aligned as {self.wire.engine}'s",
                               "name the server's engine (--target-engine)")
            verdict = self._judge(sent, rows, last)
        self.context += sent[: verdict.accepted] + [verdict.token]
        if self.record_topk:
            self.last_rows = self._top(rows[: verdict.accepted + 1])
        return verdict

    def _judge(self, sent: list[int], rows: list[Row], last: int) -> Verdict:
        """Point-mass (or greedy) verification of ``sent`` against ``rows``; ``last`` is the verify
        request's own token after the whole proposal (the bonus)."""
        for j, d in enumerate(sent):
            prefix = self.context + sent[:j]
            row = rows[j]
            if self.sampling.greedy:
                if row.argmax() is None and d not in row.known and row.hidden:
                    row.known[d] = self.wire.probe_prob(prefix, d)  # often settles it (p(d) > 1/2)
                best = row.argmax()
                if best is None:
                    best, _ = self.wire.sample(prefix, temperature=0.0, top_p=1.0, seed=0)
                if best != d:
                    return Verdict(j, best)
                continue
            u = float(torch.rand((), generator=self.gen))
            p = row.known.get(d)
            if p is None and u < row.ceiling:
                p = self.wire.probe_prob(prefix, d)
            if p is None or u >= p:
                residual, _ = self.wire.sample(prefix, temperature=1.0, top_p=1.0, seed=self._seed(), bias={d: BAN})
                return Verdict(j, residual)
        return Verdict(len(sent), last)

    def _match(self, sent: list[int]) -> tuple[Verdict, list[Row]]:
        """Point-mass verification of ``sent`` with the engine's own sampler (any temperature /
        top-p): position j's sample, drawn at context + sent[:j], accepts sent[j] when equal and
        is the correction when not; after a full match it is the bonus. Returns the verdict and
        the rows of the positions sampled (each reply's top N: distillation's rows)."""
        rows = []
        j = 0
        while True:
            got, row = self.wire.sample(self.context + sent[:j], temperature=self.sampling.temperature,
                                        top_p=self.sampling.top_p, seed=self._seed(),
                                        top_n=self.top_n if self.record_topk else 1)
            rows.append(row)
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
