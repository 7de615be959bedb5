"""The target verification service: remote == in-process verification, every bad-input class
gets a clear 4xx, authentication, idempotent retries, limits, and the local fallback."""

import http.client
import json
import socket
import threading
import time

import pytest
import torch
import uvicorn

from omnidraft.errors import OmniDraftError
from omnidraft.generate import generate_ar, generate_speculative
from omnidraft.pair import Pair
from omnidraft.remote import FallbackTarget, RemoteTarget
from omnidraft.runtime import CausalLM
from omnidraft.sampling import SamplingConfig
from omnidraft.server import ServerLimits, create_app
from omnidraft.speculative import SpecConfig
from omnidraft.target import LocalTarget

from .conftest import tiny, vocab_len

TOKEN = "test-token-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model, limits=ServerLimits()):
        self.port = _free_port()
        self.app = create_app(model, "tiny-qwen", TOKEN, limits)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                break
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(5)

    def raw(self, method, path, body=b"", token=TOKEN, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        h = {"Content-Type": "application/json", **(headers or {})}
        if token:
            h["Authorization"] = f"Bearer {token}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        if "Content-Length" not in h and body is not None:
            h["Content-Length"] = str(len(body))
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        out = json.loads(resp.read() or b"{}")
        conn.close()
        return resp.status, out


@pytest.fixture(scope="module")
def models(smollm_tok, qwen_tok):
    d = CausalLM(tiny("llama", vocab_len(smollm_tok), seed=21))
    t = tiny("qwen2", vocab_len(qwen_tok), seed=22)
    return d, t, Pair(smollm_tok, qwen_tok, d.vocab_size, vocab_len(qwen_tok))


@pytest.fixture(scope="module")
def server(models):
    s = Server(models[1], ServerLimits(max_sessions=4, burst=10_000, rate_per_s=10_000))
    yield s
    s.stop()


@pytest.mark.parametrize("temperature,mode", [(0.0, "point-mass"), (1.0, "point-mass"), (0.8, "rejection")])
def test_remote_verification_equals_in_process(models, server, temperature, mode):
    _, t, _ = models
    sampling = SamplingConfig(temperature=temperature, seed=7)
    local = LocalTarget(CausalLM(t), sampling, mode, record_topk=8)
    remote = RemoteTarget(server.url, TOKEN, sampling, mode, record_topk=8)
    prompt = [100, 200, 300, 400]
    local.start(prompt)
    remote.start(prompt)
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        proposal = torch.randint(0, 5000, (3,), generator=g).tolist()
        q = None
        if mode == "rejection":
            q = torch.zeros(3, local.vocab_size)
            for i, tok in enumerate(proposal):
                q[i, tok], q[i, tok + 1] = 0.7, 0.3
        a, b = local.verify(proposal, q), remote.verify(proposal, q)
        assert a == b
        assert torch.equal(local.last_rows[0], remote.last_rows[0])
        assert torch.allclose(local.last_rows[1], remote.last_rows[1], atol=1e-6)
    remote.close()


def test_remote_speculative_generation_equals_target_greedy(models, server):
    d, t, pair = models
    prompt = "def add(a, b):\n"
    ref = generate_ar(CausalLM(t), pair.target_tok, prompt, max_new_tokens=20)
    remote = RemoteTarget(server.url, TOKEN, SamplingConfig())
    out = generate_speculative(d, remote, pair, prompt, cfg=SpecConfig("omnidraft", k=4), max_new_tokens=20)
    assert out.token_ids == ref.token_ids
    remote.close()


def _open(server, **over):
    body = {"prompt_ids": [1, 2, 3], **over}
    return server.raw("POST", "/v1/sessions", body)


def test_auth_is_required(server):
    assert server.raw("GET", "/v1/health", token=None)[0] == 401
    status, out = server.raw("POST", "/v1/sessions", {"prompt_ids": [1]}, token="wrong-token-xxxxxxxxxxxx")
    assert status == 401 and out["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("body,code", [
    (b"{not json", "bad_request"),
    ({"prompt_ids": "1 2 3"}, "bad_request"),  # wrong type
    ({"prompt_ids": [1, "2"]}, "bad_request"),
    ({"prompt_ids": []}, "bad_request"),
    ({"prompt_ids": [1, 2], "extra": 1}, "bad_request"),
    ({"prompt_ids": [1, 10**9]}, "bad_token"),  # out of range
    ({"prompt_ids": [-1]}, "bad_token"),
    ({"prompt_ids": [1], "sampling": {"temperature": -1}}, "bad_request"),
])
def test_bad_open_requests(server, body, code):
    status, out = server.raw("POST", "/v1/sessions", body)
    assert 400 <= status < 500 and out["error"]["code"] == code, out


def test_bad_verify_requests_and_rounds(server):
    status, out = _open(server)
    assert status == 200
    sid = out["session"]
    path = f"/v1/sessions/{sid}/verify"
    cases = [({"round": 0, "proposal": list(range(40))}, 400, "proposal_too_long"),
             ({"round": 0, "proposal": [10**8]}, 400, "bad_token"),
             ({"round": 0, "proposal": "abc"}, 400, "bad_request"),
             ({"round": 3, "proposal": [5]}, 409, "wrong_round")]
    for body, want_status, want_code in cases:
        status, err = server.raw("POST", path, body)
        assert (status, err["error"]["code"]) == (want_status, want_code)
    assert server.raw("POST", "/v1/sessions/not-a-session/verify", {"round": 0, "proposal": [1]})[0] == 404
    # idempotent retry: the same round twice is applied once
    manager = server.app.app.state.manager
    first = server.raw("POST", path, {"round": 0, "proposal": [5, 6]})[1]
    length = manager.sessions[sid].target.model.length
    again = server.raw("POST", path, {"round": 0, "proposal": [5, 6]})[1]
    assert first == again and manager.sessions[sid].target.model.length == length
    assert server.raw("POST", path, {"round": 1, "proposal": []})[0] == 200
    assert server.raw("DELETE", f"/v1/sessions/{sid}")[0] == 200
    assert server.raw("POST", path, {"round": 2, "proposal": [1]})[0] == 404


def test_payload_limits(server):
    big = json.dumps({"prompt_ids": [1] * 900_000}).encode()  # 2.7 MB > 2 MiB
    status, out = server.raw("POST", "/v1/sessions", big)
    assert status == 413 and out["error"]["code"] == "payload_too_large"
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest("POST", "/v1/sessions")
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    conn.send(b"0\r\n\r\n")
    assert conn.getresponse().status == 411


def test_session_cap_expiry_and_rate_limit(models):
    s = Server(models[1], ServerLimits(max_sessions=2, session_ttl_s=5.0, rate_per_s=5, burst=8))
    try:
        a, b = _open(s), _open(s)
        assert a[0] == b[0] == 200
        status, out = _open(s)
        assert status == 503 and out["error"]["code"] == "at_capacity"
        time.sleep(5.5)  # both expire
        status, _ = s.raw("POST", f"/v1/sessions/{a[1]['session']}/verify", {"round": 0, "proposal": [1]})
        assert status == 404
        codes = [s.raw("GET", "/v1/health")[0] for _ in range(12)]
        assert 429 in codes
    finally:
        s.stop()


def test_unreachable_cloud_falls_back_to_local(models):
    d, t, pair = models
    prompt = "x = 1\n"
    ref = generate_ar(CausalLM(t), pair.target_tok, prompt, max_new_tokens=12)
    dead = RemoteTarget(f"http://127.0.0.1:{_free_port()}", TOKEN, SamplingConfig(), retries=0, timeout=1)
    with pytest.raises(OmniDraftError, match="unreachable"):
        dead.start([1, 2])
    target = FallbackTarget(dead, LocalTarget(CausalLM(t), SamplingConfig()))
    target.start([1])  # falls back at once
    assert target.fell_back
    # through the decode loop: equal output to the target's own
    dead2 = RemoteTarget(f"http://127.0.0.1:{_free_port()}", TOKEN, SamplingConfig(), retries=0, timeout=1)
    fb = FallbackTarget(dead2, LocalTarget(CausalLM(t), SamplingConfig()))
    out = generate_speculative(d, fb, pair, prompt, cfg=SpecConfig("omnidraft", k=3), max_new_tokens=12)
    assert out.token_ids == ref.token_ids
