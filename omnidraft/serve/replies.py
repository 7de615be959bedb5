"""The server's answers in OpenAI's shapes: ``chat.completion`` and its streamed
``chat.completion.chunk``s, ``text_completion`` (streamed or not), and ``usage``.

Every ``usage`` carries, beside OpenAI's counts, the speculative figures of the generation under
``speculative`` (no flag needed): tokens the drafter proposed and the target accepted, tokens
copied from the context, the target's forwards and the tokens each committed, the adapter that
drafted, the target's runtime and whether the output is exactly the target's; tokens recalled
from the pair's memory of earlier answers apart from both. Knows the shapes
and a Result's metrics; nothing about HTTP.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

from omnidraft.decode.generate import Piece, Result


def speculative(m: dict) -> dict:
    """The speculative figures of one generation's metrics (decode/metrics.py summary): ``lossless``
    only where the output is bit for bit the target alone's (an exact verification mode on a
    bit-exact runtime); ``exactness`` "logits" (eager PyTorch, llama.cpp): exact with respect to the
    logits its calls compute (pairs/build.py ``exactness``)."""
    kinds = m.get("rounds_by_kind", {})
    drafted, copied, recalled = kinds.get("drafter", {}), kinds.get("lookup", {}), kinds.get("memory", {})
    forwards = m.get("target_forwards") or 0
    return {"drafted_tokens": drafted.get("proposed", 0), "accepted_tokens": drafted.get("accepted", 0),
            "copy_proposed_tokens": copied.get("proposed", 0), "copied_tokens": copied.get("accepted", 0),
            "recall_proposed_tokens": recalled.get("proposed", 0), "recalled_tokens": recalled.get("accepted", 0),
            "target_forwards": forwards,
            "tokens_per_target_forward": round(m["new_tokens"] / forwards, 3) if forwards else None,
            "tokens_per_s": m.get("tokens_per_s"), "adapter": m.get("adapter"),
            "target_runtime": m.get("target_runtime"), "exactness": m.get("exactness"),
            "lossless": bool(m.get("lossless", True)) and m.get("exactness") == "bit-exact",
            "strategy": m.get("strategy"), "slot": m.get("slot")}


def usage(result: Result) -> dict:
    m = result.metrics
    prompt, done = m.get("prompt_tokens", 0), len(result.token_ids)
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done,
            "prompt_tokens_details": {"cached_tokens": m.get("prompt_cached", 0)},
            "speculative": speculative(m)}


@dataclass
class Reply:
    """One answer's identity and shapes; ``chat``: a chat completion, else a text completion."""

    model: str
    chat: bool
    sources: bool  # pieces carry their source
    id: str = field(default_factory=lambda: secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def _head(self) -> dict:
        if self.chat:
            return {"id": f"chatcmpl-{self.id}", "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model}
        return {"id": f"cmpl-{self.id}", "object": "text_completion", "created": self.created, "model": self.model}

    def whole(self, result: Result, pieces: list[Piece]) -> dict:
        """The non-streamed answer."""
        choice = {"index": 0, "finish_reason": result.finish_reason, "logprobs": None}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": result.text}
        else:
            choice["text"] = result.text
        if self.sources:
            choice["sources"] = [{"text": p.text, "source": p.source} for p in pieces]
        return {**self._head, "object": "chat.completion" if self.chat else "text_completion",
                "system_fingerprint": _fingerprint(result), "choices": [choice], "usage": usage(result)}

    def opening(self) -> dict | None:
        """A chat stream's first chunk (the assistant's role); none for a text completion."""
        if not self.chat:
            return None
        return {**self._head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                           "finish_reason": None, "logprobs": None}]}

    def chunk(self, piece: Piece) -> dict:
        choice = {"index": 0, "finish_reason": None, "logprobs": None}
        if self.chat:
            choice["delta"] = {"content": piece.text}
        else:
            choice["text"] = piece.text
        if self.sources:
            choice["source"] = piece.source
        return {**self._head, "choices": [choice]}

    def closing(self, result: Result) -> dict:
        """The chunk with the finish reason; it carries the usage (with the speculative figures)."""
        choice = {"index": 0, "finish_reason": result.finish_reason, "logprobs": None}
        if self.chat:
            choice["delta"] = {}
        else:
            choice["text"] = ""
        return {**self._head, "system_fingerprint": _fingerprint(result), "choices": [choice],
                "usage": usage(result)}

    def usage_chunk(self, result: Result) -> dict:
        """``stream_options.include_usage``'s last chunk: no choices, the usage."""
        return {**self._head, "choices": [], "usage": usage(result)}


def _fingerprint(result: Result) -> str:
    """What produced the answer: the drafter's adapter version (none: the target alone or unadapted)."""
    return f"omnidraft-{result.metrics.get('adapter') or 'none'}"
