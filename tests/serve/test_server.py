"""`omnidraft serve` driven by the official `openai` SDK (and raw HTTP for what the SDK will not
send): the pair's answers equal the target's own greedy output, streamed or not; seeded sampling
reproduces; bad requests are 4xx in OpenAI's shape; a client that leaves frees its turn; four
clients at once are each exact; conversations keep their caches in their own slots; a full queue
is 429; a new adapter goes live between requests."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from dataclasses import replace

import openai
import pytest

from omnidraft.decode.generate import stream_ar
from omnidraft.decode.target import LocalTarget
from omnidraft.decode.text import drained, encode_messages, encode_prompt
from omnidraft.pairs.settings import Runtime

from .conftest import KEY, serving

FP32 = Runtime(dtype="fp32")
CODE = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"


@pytest.fixture(scope="module")
def served(models, tmp_path_factory):
    """A Session of the tiny pair with two slots (within a memory budget of 64 GiB) behind the app,
    and the target's own model."""
    from omnidraft.models.loading import load_model
    from omnidraft.session import Session

    drafter, target = models
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMNIDRAFT_HOME", str(tmp_path_factory.mktemp("home")))
        budget = replace(FP32, max_memory_mib=64 << 10, cache_ram_mib=8)  # states asked for (eager cannot save them)
        with serving(lambda: Session(drafter, target, runtime=budget, slots=2)) as (url, runner):
            yield url, runner, LocalTarget(load_model(target, dtype="fp32"))


def client(url: str, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, **kw)


def own_greedy(target, tok, messages=None, prompt=None, n=24) -> str:
    ids = encode_messages(tok, messages) if messages is not None else encode_prompt(tok, prompt, chat=False)
    return drained(stream_ar(target, tok, ids, max_new_tokens=n)).text


def test_chat_and_completions_streamed_or_not_are_the_targets_own_greedy_output(served, qwen_tok):
    url, runner, target = served
    c = client(url)
    messages = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "def fib(n):"}]
    ref = own_greedy(target, qwen_tok, messages)
    whole = c.chat.completions.create(model="tiny", messages=messages, max_tokens=24)
    assert whole.choices[0].message.content == ref and whole.choices[0].finish_reason == "length"
    spec = whole.usage.model_extra["speculative"]
    assert whole.usage.completion_tokens == 24 and spec["target_forwards"] >= 1
    # eager PyTorch: equal here, but its calls are not batch-invariant, so it is not called lossless
    assert spec["exactness"] == "logits" and not spec["lossless"] and spec["target_runtime"] == "eager"
    assert whole.usage.prompt_tokens == len(encode_messages(qwen_tok, messages))
    chunks = list(c.chat.completions.create(model="tiny", messages=messages, max_completion_tokens=24, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == ref
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24  # include_usage's last chunk
    parts = [{"type": "text", "text": "def fib"}, {"type": "text", "text": "(n):"}]
    as_parts = c.chat.completions.create(model="tiny", messages=[messages[0], {"role": "user", "content": parts}],
                                         max_tokens=8)
    joined = own_greedy(target, qwen_tok, [messages[0], {"role": "user", "content": "def fib\n(n):"}], n=8)
    assert as_parts.choices[0].message.content == joined
    text = c.completions.create(model="tiny", prompt=CODE, max_tokens=20)
    assert text.choices[0].text == own_greedy(target, qwen_tok, prompt=CODE, n=20)
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(model="tiny", prompt=CODE, max_tokens=20,
                                                                         stream=True) if ch.choices)
    assert streamed == text.choices[0].text


def test_stop_strings_cut_the_text_and_say_stop(served, qwen_tok):
    url, _runner, target = served
    ref = own_greedy(target, qwen_tok, prompt=CODE, n=40)
    stop = ref[5:8]  # a string the answer holds
    out = client(url).completions.create(model="tiny", prompt=CODE, max_tokens=40, stop=[stop, "\x00never"])
    assert out.choices[0].text == ref[:ref.index(stop)] and out.choices[0].finish_reason == "stop"
    streamed = list(client(url).completions.create(model="tiny", prompt=CODE, max_tokens=40, stop=stop, stream=True))
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == ref[:ref.index(stop)]
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_seeded_sampling_reproduces_and_each_piece_names_its_source(served):
    url, _runner, _target = served
    c = client(url)
    ask = dict(model="tiny", messages=[{"role": "user", "content": "Write a poem."}], max_tokens=16, temperature=0.9,
               top_p=0.95)
    a, b = (c.chat.completions.create(**ask, seed=7).choices[0].message.content for _ in range(2))
    other = c.chat.completions.create(**ask, seed=8).choices[0].message.content
    assert a == b and a != other
    chunks = list(c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": CODE + CODE}],
                                            max_tokens=24, stream=True, extra_body={"token_sources": True}))
    sources = {ch.choices[0].model_extra["source"] for ch in chunks[1:] if ch.choices and ch.choices[0].delta.content}
    assert sources and sources <= {"drafted", "copied", "remembered", "target"}
    whole = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                      extra_body={"token_sources": True})
    pieces = whole.choices[0].model_extra["sources"]
    assert "".join(p["text"] for p in pieces) == whole.choices[0].message.content


def _raw(url: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request(method, path, body=body, headers={"authorization": f"Bearer {KEY}", **(headers or {})})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), data


def _chat(**over) -> bytes:
    return json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                       **over}).encode()


BAD = [  # (what, method, path, body, extra headers, status, param)
    ("malformed JSON", "POST", "/v1/chat/completions", b'{"model": "tiny", "messages": [', {}, 400, None),
    ("invalid UTF-8", "POST", "/v1/chat/completions", b'{"model": "tiny\xff\xfe"}', {}, 400, None),
    ("deeply nested JSON", "POST", "/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000, {}, 400, None),
    ("not an object", "POST", "/v1/chat/completions", b"[1, 2]", {}, 400, None),
    ("no model", "POST", "/v1/chat/completions", json.dumps({"messages": []}).encode(), {}, 400, "model"),
    ("unknown model", "POST", "/v1/chat/completions", _chat(model="gpt-4o"), {}, 404, "model"),
    ("no messages", "POST", "/v1/chat/completions", json.dumps({"model": "tiny"}).encode(), {}, 400, "messages"),
    ("empty messages", "POST", "/v1/chat/completions", _chat(messages=[]), {}, 400, "messages"),
    ("a bad role", "POST", "/v1/chat/completions", _chat(messages=[{"role": "robot", "content": "x"}]), {}, 400,
     "messages[0].role"),
    ("content not text", "POST", "/v1/chat/completions", _chat(messages=[{"role": "user", "content": 5}]), {}, 400,
     "messages[0].content"),
    ("an image part", "POST", "/v1/chat/completions",
     _chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), {}, 400,
     "messages[0].content[0].type"),
    ("only empty text", "POST", "/v1/chat/completions", _chat(messages=[{"role": "user", "content": "  "}]), {}, 400,
     "messages"),
    ("n > 1", "POST", "/v1/chat/completions", _chat(n=2), {}, 400, "n"),
    ("tools", "POST", "/v1/chat/completions", _chat(tools=[{"type": "function", "function": {"name": "f"}}]), {}, 400,
     "tools"),
    ("an unknown field", "POST", "/v1/chat/completions", _chat(frobnicate=1), {}, 400, "frobnicate"),
    ("temperature a string", "POST", "/v1/chat/completions", _chat(temperature="hot"), {}, 400, "temperature"),
    ("temperature out of range", "POST", "/v1/chat/completions", _chat(temperature=3.5), {}, 400, "temperature"),
    ("top_p 0", "POST", "/v1/chat/completions", _chat(top_p=0), {}, 400, "top_p"),
    ("max_tokens 0", "POST", "/v1/chat/completions", _chat(max_tokens=0), {}, 400, "max_tokens"),
    ("max_tokens a float", "POST", "/v1/chat/completions", _chat(max_tokens=2.5), {}, 400, "max_tokens"),
    ("max_tokens past the context", "POST", "/v1/chat/completions", _chat(max_tokens=10**6), {}, 400, "messages"),
    ("a prompt past the context", "POST", "/v1/completions",
     json.dumps({"model": "tiny", "prompt": "word " * 3000}).encode(), {}, 400, "prompt"),
    ("a negative seed", "POST", "/v1/chat/completions", _chat(seed=-1), {}, 400, "seed"),
    ("five stop strings", "POST", "/v1/chat/completions", _chat(stop=list("abcde")), {}, 400, "stop"),
    ("stream_options without stream", "POST", "/v1/chat/completions", _chat(stream_options={"include_usage": True}),
     {}, 400, "stream_options"),
    ("logprobs", "POST", "/v1/chat/completions", _chat(logprobs=True), {}, 400, "logprobs"),
    ("token-id prompt", "POST", "/v1/completions", json.dumps({"model": "tiny", "prompt": [1, 2, 3]}).encode(), {},
     400, "prompt"),
    ("echo", "POST", "/v1/completions", json.dumps({"model": "tiny", "prompt": "x", "echo": True}).encode(), {}, 400,
     "echo"),
    ("a body past the bound", "POST", "/v1/chat/completions", b" " * (2 << 20), {}, 413, None),
    ("no key", "POST", "/v1/chat/completions", _chat(), {"authorization": ""}, 401, None),
    ("a wrong key", "GET", "/v1/models", None, {"authorization": "Bearer nope-nope-nope"}, 401, None),
    ("metrics without the key", "GET", "/metrics", None, {"authorization": ""}, 401, None),
    ("an unknown route", "GET", "/v1/engines", None, {}, 404, None),
    ("a wrong method", "GET", "/v1/chat/completions", None, {}, 405, None),
]


def test_every_client_mistake_is_a_4xx_in_openais_error_shape(served):
    url, runner, _target = served
    done = sum(runner.counters.requests.values())
    for what, method, path, body, headers, status, param in BAD:
        got, head, data = _raw(url, method, path, body, headers)
        assert got == status, (what, got, data[:200])
        error = json.loads(data)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], what
        assert error["param"] == param, (what, error)
        assert head.get("x-should-retry") == "false", what
    assert sum(runner.counters.requests.values()) == done  # none of them generated
    status, _, data = _raw(url, "GET", "/health", headers={"authorization": ""})
    assert status == 200 and json.loads(data)["status"] == "ok"  # no key needed


def test_a_client_that_leaves_mid_stream_frees_its_turn_and_the_next_request_is_exact(served, qwen_tok):
    url, runner, target = served
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps({"model": "tiny", "prompt": "Once upon",
                                                             "max_tokens": 900, "stream": True}),
                 headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")
    cancelled = runner.counters.requests.get("cancelled", 0)
    conn.sock.shutdown(socket.SHUT_RDWR)  # gone mid-stream
    conn.close()
    t0 = time.perf_counter()
    while runner.running or runner.counters.requests.get("cancelled", 0) == cancelled:
        assert time.perf_counter() - t0 < 10, "the generation went on without its client"
        time.sleep(0.02)
    out = client(url).completions.create(model="tiny", prompt=CODE, max_tokens=20)
    assert out.choices[0].text == own_greedy(target, qwen_tok, prompt=CODE, n=20)
    assert time.perf_counter() - t0 < 10  # not held back behind the abandoned generation


def test_four_clients_at_once_are_each_exact(served, qwen_tok):
    url, _runner, target = served
    prompts = ["def sort(xs):", "class Stack:", "import json\n", "SELECT name FROM"]
    refs = [own_greedy(target, qwen_tok, [{"role": "user", "content": p}], n=16) for p in prompts]
    got: dict[int, str] = {}

    def ask(i: int) -> None:
        got[i] = client(url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": prompts[i]}], max_tokens=16).choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [got.get(i) for i in range(4)] == refs


def test_interleaved_conversations_keep_their_caches_in_their_own_slots(served, qwen_tok):
    """Conversation A, then B, then A's follow-up: A's turn reads only its new tokens (its slot's
    caches survived B), as the SDK sees in usage.prompt_tokens_details.cached_tokens."""
    url, _runner, target = served
    c = client(url)
    a1 = [{"role": "user", "content": "Here is my file:\n" + CODE * 3 + "\nWhat does mul do?"}]
    b1 = [{"role": "user", "content": "Tell me about Paris."}]
    first = c.chat.completions.create(model="tiny", messages=a1, max_tokens=12)
    other = c.chat.completions.create(model="tiny", messages=b1, max_tokens=12)
    slot_a, slot_b = (r.usage.model_extra["speculative"]["slot"] for r in (first, other))
    assert slot_a != slot_b
    a2 = a1 + [{"role": "assistant", "content": first.choices[0].message.content},
               {"role": "user", "content": "Now rename it to times."}]
    follow = c.chat.completions.create(model="tiny", messages=a2, max_tokens=12)
    assert follow.usage.model_extra["speculative"]["slot"] == slot_a
    assert follow.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    assert follow.choices[0].message.content == own_greedy(target, qwen_tok, a2, n=12)


def test_metrics_count_what_was_served(served):
    url, runner, _target = served
    client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": CODE}], max_tokens=8)
    status, _, data = _raw(url, "GET", "/metrics")
    text = data.decode()
    assert status == 200
    for name in ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total", "spec_decode_num_accepted_copy_tokens_total",
                 "generation_tokens_total", "adapter_info", "slots"):
        assert f"omnidraft:{name}{{" in text, name
    assert 'omnidraft:target_runtime_info{model_name="tiny",runtime="eager",exactness="logits"} 1' in text
    assert f'omnidraft:memory_budget_bytes{{model_name="tiny"}} {64 << 30:g}' in text
    assert 'omnidraft:resident_bytes{model_name="tiny",part="total"}' in text
    assert 'omnidraft:saved_states_bytes{model_name="tiny",where="ram"} 0' in text  # none: eager saves no state
    generated = next(float(line.split()[-1]) for line in text.splitlines()
                     if line.startswith("omnidraft:generation_tokens_total{"))
    assert generated == runner.counters.generation_tokens >= 8


def test_a_full_queue_is_429_with_retry_after_and_loading_is_503_saying_its_stage(models, home):
    from omnidraft.session import Session

    drafter, target = models
    release = threading.Event()

    def pairing(say):  # a first start's pairing (jobs/first_start.py), its live status line and its log lines
        say("  tiny (target): lowering 0:41", end="")
        say("pairing tiny with tiny ...")
        release.wait(60)

    with serving(lambda: Session(drafter, target, runtime=FP32, log=False), queue=0, ready=False,
                 prepare=pairing) as (url, runner):
        deadline = time.time() + 30
        while runner.stage != "pairing tiny with tiny ..." and time.time() < deadline:
            time.sleep(0.02)
        status, head, data = _raw(url, "GET", "/health")
        assert status == 503 and json.loads(data) == {"status": "loading", "stage": "pairing tiny with tiny ..."}
        assert runner.stage == "pairing tiny with tiny ..."
        status, head, data = _raw(url, "POST", "/v1/chat/completions", _chat())
        assert status == 503 and head.get("retry-after") and json.loads(data)["error"]["code"] == "loading"
        release.set()
        while runner.session is None:
            time.sleep(0.05)
        host, port = url.removeprefix("http://").split(":")
        busy = http.client.HTTPConnection(host, int(port), timeout=60)
        busy.request("POST", "/v1/completions", body=json.dumps({"model": "tiny", "prompt": "Once", "max_tokens": 600,
                                                                 "stream": True}),
                     headers={"authorization": f"Bearer {KEY}"})
        assert busy.getresponse().status == 200
        status, head, data = _raw(url, "POST", "/v1/chat/completions", _chat())
        assert status == 429 and int(head["retry-after"]) >= 1 and json.loads(data)["error"]["code"] == "queue_full"
        busy.close()


def test_a_newly_published_adapter_serves_the_next_request(models, home, qwen_tok):
    from omnidraft.jobs.pairing import fresh_adapter
    from omnidraft.models.loading import load_model
    from omnidraft.session import Session

    drafter, target = models
    with serving(lambda: Session(drafter, target, runtime=FP32, slots=2)) as (url, runner):
        c = client(url)
        ask = dict(model="tiny", messages=[{"role": "user", "content": "def add(a, b):"}], max_tokens=12)
        before = c.chat.completions.create(**ask)
        s = runner.session
        version = fresh_adapter(s.store, s.spec.name, s.spec.drafter, s.base.model)
        after = c.chat.completions.create(**ask)
        assert before.usage.model_extra["speculative"]["adapter"] != version
        assert after.usage.model_extra["speculative"]["adapter"] == version
        assert after.system_fingerprint == f"omnidraft-{version}"
        ref = own_greedy(LocalTarget(load_model(target, dtype="fp32")), qwen_tok, ask["messages"], n=12)
        assert after.choices[0].message.content == ref == before.choices[0].message.content
        _, _, data = _raw(url, "GET", "/metrics")
        assert f'version="{version}"' in data.decode()


def test_each_api_key_recalls_only_its_own_answers(models, tmp_path, monkeypatch, qwen_tok):
    """Two keys, one pair: the second key's first answer gets no proposal from the first key's
    memory; the first key's second answer recalls its first; every answer the target's own."""
    from omnidraft.models.loading import load_model
    from omnidraft.session import Session

    drafter, target = models
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    other = "second-key-0123456789"
    messages = [{"role": "user", "content": "def fib(n):"}]
    ref = own_greedy(LocalTarget(load_model(target, dtype="fp32")), qwen_tok, messages)
    with serving(lambda: Session(drafter, target, runtime=FP32, k=4, log=False), key=(KEY, other)) as (url, _):
        def ask(key: str):
            c = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
            r = c.chat.completions.create(model="tiny", messages=messages, max_tokens=24)
            assert r.choices[0].message.content == ref
            return r.usage.model_extra["speculative"]

        assert ask(KEY)["recall_proposed_tokens"] == 0  # nothing remembered yet
        assert ask(other)["recall_proposed_tokens"] == 0  # the first key's answer is not this key's
        assert ask(KEY)["recalled_tokens"] >= 12
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="wrong-key-0123456", max_retries=0).models.list()
