"""What an engine's replies establish about the target's next-token distributions (``Row``), and
the one interface (``Wire``) through which remote/openai_api.py's target asks an engine for them.
Each engine carries requests its own way: llama-cpp-python's text prompts with echoed, text-keyed
log-probabilities (remote/echo_wire.py); vLLM's token-id prompts with ``prompt_logprobs`` and
SGLang's native ``/generate`` with ``return_logprob`` (remote/id_wires.py).

Knows the shape of what replies say (and the OpenAI completions stream all three engines send);
nothing about verification, drafters or HTTP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Protocol

from omnidraft.remote.http import BadReply

ENGINES = ("llama-cpp-python", "vllm", "sglang")  # the Wires there are
TOP_N = 20  # log-probabilities asked per position (vLLM's default --max-logprobs)
FORCE, BAN = 100.0, -100.0  # logit biases: e^-100 is below float32's resolution of any probability


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


def id_row(logprobs: dict[int, float], top_n: int) -> Row:
    """A Row from id-keyed log-probabilities: an engine's top ``top_n`` at one position plus,
    possibly, one more id below them (the prompt's or the sampled token). Every id is exact; the
    ``top_n``-th largest bounds every id not listed."""
    probs = {i: math.exp(lp) for i, lp in logprobs.items()}
    ranked = sorted(probs.values(), reverse=True)
    return Row(known=probs, top_min=ranked[min(top_n, len(ranked)) - 1] if ranked else 1.0)


def stream_choices(events: Iterator[dict]) -> Iterator[tuple[str, str | None]]:
    """(text, finish reason) of each event of an OpenAI completions stream (every engine here
    streams its generation alone that way)."""
    for event in events:
        if event.get("choices") == []:  # vLLM's closing usage event
            continue
        try:
            choice = event["choices"][0]
            piece = choice.get("text") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise BadReply("the OpenAI-API server's stream event has no choice text", "check the server") from None
        yield piece, choice.get("finish_reason")


class Wire(Protocol):
    """One engine's requests. ``ids`` are always the whole sequence (context + proposal); the
    engine's prefix cache makes resending it cheap. Every method raises BadReply when a reply
    does not say what it must."""

    engine: str  # "llama-cpp-python" | "vllm" | "sglang"
    evaluations: int  # requests that ran the model (each one batched forward)

    def expressible(self, ids: list[int]) -> bool:
        """The engine can be sent ``ids`` as they are (a text wire: their text tokenises back)."""

    def sendable(self, context: list[int], proposal: list[int]) -> list[int]:
        """The longest prefix of ``proposal`` this wire can send after ``context``."""

    def verify(self, ids: list[int], m: int, *, temperature: float, seed: int) -> tuple[list[Row], int]:
        """One request over ``ids`` whose last ``m`` are a proposal: the m+1 rows after
        ids[:len(ids)-m+j] (j = 0..m), and the one token the engine generated after ``ids``
        at ``temperature`` (0: argmax)."""

    def sample(self, ids: list[int], *, temperature: float, top_p: float, seed: int,
               bias: dict[int, float] | None = None, top_n: int = 1) -> tuple[int, Row]:
        """The engine's own next token after ``ids`` at these settings (``bias``: logit biases),
        and its reply's row for that position (the top ``top_n``)."""

    def probe_prob(self, ids: list[int], token: int) -> float:
        """p(token | ids) at temperature 1, exact."""

    def stream(self, ids: list[int], max_tokens: int, *, temperature: float, top_p: float,
               seed: int | None) -> Iterator[tuple[str, str | None]]:
        """The engine generating alone: (text piece, finish reason or None) as it sends them."""
