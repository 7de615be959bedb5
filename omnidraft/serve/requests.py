"""What a client asked for: the bodies of ``POST /v1/chat/completions`` and ``POST /v1/completions``
read into an ``Ask``, every mistake a 400 naming the field (serve/errors.py).

A field is either implemented, accepted at the value that changes nothing (``n: 1``,
``presence_penalty: 0``, ``logprobs: false``, ...), or refused naming it: nothing a client asks for
is silently ignored. Unknown fields are refused as OpenAI refuses them. Knows OpenAI's request
schema; nothing about models or sessions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from omnidraft.sampling import MAX_SEED, MIN_TEMPERATURE
from omnidraft.serve.errors import ApiError, bad

MAX_STOPS = 4  # OpenAI's bound on `stop`
MAX_TEMPERATURE = 2.0  # OpenAI's range
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# accepted only at the value that changes nothing (OpenAI's default): anything else is refused
NEUTRAL = {"n": 1, "presence_penalty": 0, "frequency_penalty": 0, "logprobs": False, "logit_bias": {},
           "best_of": 1, "echo": False, "suffix": None, "top_logprobs": None, "parallel_tool_calls": None,
           "response_format": {"type": "text"}, "modalities": ["text"], "store": False, "tool_choice": "none",
           "tools": []}
# fields with no effect on the output
METADATA = {"user", "metadata", "service_tier"}
COMMON = {"model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options",
          "token_sources"} | METADATA
CHAT = COMMON | {"messages", "max_completion_tokens", "n", "presence_penalty", "frequency_penalty", "logprobs",
                 "logit_bias", "top_logprobs", "parallel_tool_calls", "response_format", "modalities", "store",
                 "tools", "tool_choice"}
COMPLETION = COMMON | {"prompt", "n", "presence_penalty", "frequency_penalty", "logprobs", "logit_bias", "best_of",
                       "echo", "suffix"}
UNSUPPORTED = {"functions": "function calling", "function_call": "function calling", "audio": "audio output",
               "prediction": "predicted outputs", "reasoning_effort": "reasoning", "web_search_options": "web search"}


@dataclass(frozen=True)
class Ask:
    """One request: a conversation (``messages``) or a text ``prompt``, and how to answer it."""

    model: str
    messages: list[dict] | None
    prompt: str | None
    max_tokens: int | None  # None: to the end of the context window
    temperature: float | None  # None: the server's default sampling
    top_p: float | None
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    sources: bool  # each piece says where its tokens came from (OmniDraft's own field `token_sources`)


def read_json(body: bytes) -> dict:
    """A request body as a JSON object; malformed, invalid UTF-8 or nested too deep is a 400."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise bad(None, f"the body is not valid UTF-8 (byte {err.start})", "invalid_body") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise bad(None, "the JSON body is nested too deeply", "invalid_body") from None
    except ValueError as err:
        raise bad(None, f"the body is not valid JSON: {err}", "invalid_body") from None
    if not isinstance(value, dict):
        raise bad(None, "the body must be a JSON object", "invalid_body")
    return value


def chat_request(body: dict) -> Ask:
    _fields(body, CHAT)
    messages = _messages(body.get("messages"))
    max_tokens = _positive(body, "max_completion_tokens")
    return _ask(body, messages=messages, prompt=None,
                max_tokens=max_tokens if max_tokens is not None else _positive(body, "max_tokens"))


def completion_request(body: dict) -> Ask:
    _fields(body, COMPLETION)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list):
        raise bad("prompt", "only one text prompt per request is supported (not a batch or token ids)",
                  "unsupported_value")
    if not isinstance(prompt, str) or not prompt.strip():
        raise bad("prompt", "must be a non-empty string", "invalid_type" if not isinstance(prompt, str) else
                  "invalid_value")
    max_tokens = _positive(body, "max_tokens")
    return _ask(body, messages=None, prompt=prompt, max_tokens=16 if "max_tokens" not in body else max_tokens)


def _fields(body: dict, known: set[str]) -> None:
    for name, value in body.items():
        if name in UNSUPPORTED:
            raise bad(name, f"{UNSUPPORTED[name]} is not supported by this server", "unsupported_parameter")
        if name not in known:
            raise bad(name, "unrecognized request argument", "unknown_parameter")
        if name in NEUTRAL and value is not None and value != NEUTRAL[name]:
            raise bad(name, f"only {json.dumps(NEUTRAL[name])} is supported (this server does not implement it)",
                      "unsupported_value")
    if "model" not in body:
        raise bad("model", "is required", "missing_required_parameter")
    if not isinstance(body["model"], str):
        raise bad("model", "must be a string", "invalid_type")


def _ask(body: dict, *, messages, prompt, max_tokens) -> Ask:
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not stream:
        raise bad("stream_options", "is only allowed when stream is true")
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_usage"}):
        raise bad("stream_options", "must be an object with include_usage only")
    include_usage = _bool(options or {}, "include_usage", False, "stream_options.include_usage")
    temperature = _number(body, "temperature", 0.0, MAX_TEMPERATURE)
    if temperature is not None and 0 < temperature < MIN_TEMPERATURE:
        raise bad("temperature", f"must be 0 (greedy) or at least {MIN_TEMPERATURE:g}")
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p == 0.0:
        raise bad("top_p", "must be above 0")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise bad("seed", "must be an integer", "invalid_type")
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise bad("seed", "must be in 0..2^63-1")
    return Ask(model=body["model"], messages=messages, prompt=prompt, max_tokens=max_tokens, temperature=temperature,
               top_p=top_p, seed=seed, stop=_stops(body.get("stop")), stream=stream, include_usage=include_usage,
               sources=_bool(body, "token_sources", False))


def _bool(body: dict, name: str, default: bool, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(param or name, "must be a boolean", "invalid_type")
    return value


def _number(body: dict, name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(name, "must be a number", "invalid_type")
    if not low <= value <= high:  # also refuses NaN
        raise bad(name, f"must be in [{low:g}, {high:g}], got {value}")
    return float(value)


def _positive(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, "must be an integer", "invalid_type")
    if value < 1:
        raise bad(name, f"must be at least 1, got {value}")
    return value


def _stops(value) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("stop", "must be a string or a list of strings", "invalid_type")
    if len(stops) > MAX_STOPS:
        raise bad("stop", f"at most {MAX_STOPS} stop strings")
    if any(not s for s in stops):
        raise bad("stop", "stop strings must not be empty")
    return tuple(stops)


def _messages(value) -> list[dict]:
    """OpenAI chat messages as ``{"role", "content"}`` with text content (a string or text parts)."""
    if not isinstance(value, list):
        raise bad("messages", "is required: a list of messages", "missing_required_parameter" if value is None
                  else "invalid_type")
    if not value:
        raise bad("messages", "must hold at least one message")
    out = []
    for i, m in enumerate(value):
        at = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(at, "must be an object", "invalid_type")
        for key in m:
            if key not in ("role", "content"):
                what = "tool calls are" if key in ("tool_calls", "tool_call_id", "function_call") else f"'{key}' is"
                raise bad(f"{at}.{key}", f"{what} not supported by this server", "unsupported_parameter")
        role = m.get("role")
        if role in ("tool", "function"):
            raise bad(f"{at}.role", f"'{role}' messages are not supported by this server", "unsupported_value")
        if role not in ROLES:
            raise bad(f"{at}.role", f"must be one of {', '.join(ROLES)}")
        out.append({"role": ROLES[role], "content": _content(m.get("content"), f"{at}.content")})
    if out[-1]["role"] == "assistant":
        raise bad(f"messages[{len(out) - 1}].role", "the last message must not be the assistant's (continuing "
                  "an assistant message is not supported)", "unsupported_value")
    if not any(m["content"].strip() for m in out):
        raise bad("messages", "every message is empty")
    return out


def _content(content, at: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(at, "must be a string or a list of text parts", "invalid_type")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise bad(f"{at}[{j}]", "must be an object with a type", "invalid_type")
        if part["type"] != "text":
            raise bad(f"{at}[{j}].type", f"'{part['type']}' parts are not supported by this server (text only)",
                      "unsupported_value")
        if set(part) - {"type", "text"} or not isinstance(part.get("text"), str):
            raise bad(f"{at}[{j}]", "a text part is {\"type\": \"text\", \"text\": string}", "invalid_type")
        texts.append(part["text"])
    return "\n".join(texts)  # as vLLM joins text parts


def refuse_model(asked: str, served: str) -> ApiError:
    return ApiError(404, f"the model '{asked}' does not exist here; this server serves '{served}'", param="model",
                    code="model_not_found")
