"""Requests read into an Ask: what each field becomes, the neutral values accepted, and the
refusals naming their field (the whole table of refusals runs over HTTP in test_server.py)."""

from __future__ import annotations

import pytest

from omnidraft.serve.errors import ApiError
from omnidraft.serve.requests import chat_request, completion_request, read_json


def test_a_chat_request_reads_into_an_ask():
    ask = chat_request({"model": "m", "messages": [{"role": "developer", "content": "be brief"},
                                                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                                {"type": "text", "text": "b"}]}],
                        "max_tokens": 9, "max_completion_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 3,
                        "stop": "END", "stream": True, "stream_options": {"include_usage": True}, "n": 1,
                        "presence_penalty": 0, "logprobs": False, "user": "u1", "token_sources": True})
    assert ask.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a\nb"}]
    assert (ask.max_tokens, ask.temperature, ask.top_p, ask.seed, ask.stop) == (5, 0.5, 0.9, 3, ("END",))
    assert ask.stream and ask.include_usage and ask.sources
    plain = chat_request({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert plain.max_tokens is None and plain.temperature is None and not plain.stream  # to the window's end


def test_a_completion_defaults_to_openais_16_tokens_and_one_prompt():
    assert completion_request({"model": "m", "prompt": "x"}).max_tokens == 16
    assert completion_request({"model": "m", "prompt": ["x"], "max_tokens": None}).max_tokens is None
    with pytest.raises(ApiError) as err:
        completion_request({"model": "m", "prompt": ["x", "y"]})
    assert err.value.param == "prompt" and err.value.status == 400


@pytest.mark.parametrize("body,param", [
    ({"model": "m", "messages": [{"role": "user", "content": "x", "name": "bob"}]}, "messages[0].name"),
    ({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
     "messages[1].role"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "functions": []}, "functions"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
     "response_format"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 0.00001}, "temperature"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
    ({"model": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
])
def test_refusals_name_the_field(body, param):
    with pytest.raises(ApiError) as err:
        chat_request(body)
    assert err.value.status == 400 and err.value.param == param and param in err.value.message


def test_bodies_that_are_not_json_objects_are_400s():
    for body in (b"\xff", b"{", b"[" * 50_000 + b"]" * 50_000, b"3"):
        with pytest.raises(ApiError) as err:
            read_json(body)
        assert err.value.status == 400
