"""Text in and out of token ids: prompt encoding (plain or chat template), stop ids, an
incremental detokenizer that streams only completed characters, and running a stream of text
pieces to the result it returns (an engine's ``Alone``).

Knows tokenizers; nothing about models or decoding strategies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generator, TypeVar

from omnidraft.errors import OmniDraftError

T = TypeVar("T")


@dataclass(frozen=True)
class Alone:
    """What an engine generating on its own returned (a serving engine, llama.cpp in-process)."""

    text: str
    tokens: int  # new tokens (a serving engine's EOS not counted; llama.cpp's counted, as `ar` counts it)
    seconds: float


def drained(pieces: Generator[str, None, T], on_text: Callable[[str], None] | None = None) -> T:
    """Run a generator of text pieces to its end (``on_text`` sees each piece); its return value."""
    while True:
        try:
            piece = next(pieces)
        except StopIteration as done:
            return done.value
        if on_text:
            on_text(piece)


def encode_prompt(tok, prompt: str, *, chat: bool) -> list[int]:
    """Token ids of a user prompt, through the tokenizer's chat template when ``chat``."""
    if not prompt or not prompt.strip():
        raise OmniDraftError("empty prompt", "pass some text with --prompt")
    if chat:
        if not getattr(tok, "chat_template", None):
            raise OmniDraftError("this tokenizer has no chat template", "drop --chat")
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                      add_generation_prompt=True, tokenize=True, return_dict=False)
        return [int(i) for i in ids]
    return [int(i) for i in tok(prompt, add_special_tokens=True)["input_ids"]]


def chat_preamble(tok) -> list[int]:
    """The ids every chat prompt starts with (the template's system turn and the user turn's
    opening); none without a chat template."""
    if not getattr(tok, "chat_template", None):
        return []
    a, b = encode_prompt(tok, "a", chat=True), encode_prompt(tok, "b", chat=True)
    return a[:next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))]


def generation_eos_ids(generation_config) -> set[int]:
    """The EOS ids of a model's generation config (none without one)."""
    eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    if isinstance(eos, int):
        return {eos}
    return {int(e) for e in eos} if eos else set()


def model_eos_ids(lm) -> set[int]:
    """The EOS ids an LM wrapper knows: its own ``eos_ids`` (an exported program records them),
    else those of its underlying Hugging Face model, if it has one."""
    own = getattr(lm, "eos_ids", None)
    if own is not None:
        return set(own)
    return generation_eos_ids(getattr(getattr(lm, "model", None), "generation_config", None))


def stop_ids(tok, eos_ids: set[int] = frozenset()) -> set[int]:
    """End-of-sequence ids: the tokenizer's EOS plus the model's own ``eos_ids``."""
    ids = set(eos_ids)
    if tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    return ids


class Detokenizer:
    """Incremental detokenization: ``push(ids)`` returns the text those ids completed.

    Decodes a short window (prefix_offset .. end) and emits only what extends the window's
    previous text, holding back a trailing partial UTF-8 character (U+FFFD).
    """

    def __init__(self, tok, context: list[int] | None = None):
        self.tok = tok
        self.ids: list[int] = list(context or [])[-4:]
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        prefix = self._decode(self.ids[self.prefix_offset:self.read_offset])
        full = self._decode(self.ids[self.prefix_offset:])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return full[len(prefix):]
        return ""


ROLES = ("system", "user", "assistant")


def encode_messages(tok, messages: list[dict]) -> list[int]:
    """Token ids of a conversation (``[{"role": "system" | "user" | "assistant", "content": str}]``)
    through the tokenizer's own chat template, with the assistant's next turn opened."""
    if not getattr(tok, "chat_template", None):
        raise OmniDraftError("this tokenizer has no chat template", "send a plain prompt (a completion) instead")
    if not isinstance(messages, list) or not messages:
        raise OmniDraftError("a conversation needs at least one message")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise OmniDraftError(f"message {i} must be {{'role': {' | '.join(ROLES)}, 'content': str}}")
    if not any(m["content"].strip() for m in messages):
        raise OmniDraftError("every message is empty", "send some text")
    try:
        ids = tok.apply_chat_template([{"role": m["role"], "content": m["content"]} for m in messages],
                                      add_generation_prompt=True, tokenize=True, return_dict=False)
    except Exception as err:  # the template's own refusal (jinja2's TemplateError: roles out of order, ...)
        raise OmniDraftError(f"the model's chat template refuses these messages: {err}") from None
    return [int(i) for i in ids]


class StopText:
    """Stop strings over streamed text: ``push`` returns the text that can be shown (held back
    while it may be the start of a stop string) and whether a stop string ended the text there;
    the stop string itself is never shown. ``flush`` gives what is held at the end."""

    def __init__(self, stops: tuple[str, ...] | list[str] = ()):
        self.stops = [s for s in stops if s]
        self.held = ""

    def push(self, text: str) -> tuple[str, bool]:
        buf = self.held + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held = ""
            return buf[:min(hits)], True
        keep = max((n for s in self.stops for n in range(min(len(s) - 1, len(buf)), 0, -1)
                    if buf.endswith(s[:n])), default=0)
        self.held = buf[len(buf) - keep:] if keep else ""
        return buf[:len(buf) - keep], False

    def flush(self) -> str:
        out, self.held = self.held, ""
        return out


def drafter_prompt(draft_tok, target_tok, prompt: str | list[dict], target_ids: list[int], *, chat: bool) -> list[int]:
    """The prompt in the drafter's vocabulary: text through the drafter's own chat template with
    ``chat``; a conversation through it too, or (where the drafter's template refuses it) the
    target's text of it (``target_ids``) tokenized by the drafter."""
    if isinstance(prompt, str):
        return encode_prompt(draft_tok, prompt, chat=chat)
    try:
        return encode_messages(draft_tok, prompt)
    except OmniDraftError:
        text = target_tok.decode(target_ids, skip_special_tokens=False)
        return [int(i) for i in draft_tok(text, add_special_tokens=False)["input_ids"]]
