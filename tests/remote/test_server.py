"""The target verification service: remote == in-process verification, every bad-input class
gets a clear 4xx, authentication, idempotent retries, limits, and the local fallback."""

import copy
import http.client
import json
import socket
import threading
import time

import pytest
import torch
import uvicorn

from omnidraft.errors import OmniDraftError
from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative, stream_speculative
from omnidraft.translate.state import PairState
from omnidraft.remote.remote import FallbackTarget, RemoteTarget
from omnidraft.models.eager import CausalLM
from omnidraft.sampling import SamplingConfig
from omnidraft.remote.server import ServerLimits, create_app
from omnidraft.propose.config import SpecConfig
from omnidraft.decode.target import LocalTarget

from ..conftest import tiny, vocab_len

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
    return d, t, PairState(smollm_tok, qwen_tok, d.vocab_size, vocab_len(qwen_tok))


@pytest.fixture(scope="module")
def server(models):
    s = Server(models[1], ServerLimits(max_sessions=4, burst=10_000, rate_per_s=10_000))
    yield s
    s.stop()


@pytest.mark.parametrize("temperature,mode", [(0.0, "point-mass"), (1.0, "point-mass"), (0.8, "rejection")])
def test_remote_verification_equals_in_process(models, server, temperature, mode):
    _, t, _ = models
    sampling = SamplingConfig(temperature=temperature, seed=7)
    local = LocalTarget(CausalLM(t), sampling, mode)
    remote = RemoteTarget(server.url, TOKEN, sampling, mode)
    prompt = [100, 200, 300, 400]
    local.start(prompt, record_topk=8)
    remote.start(prompt, record_topk=8)
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
    ref = generate_ar(LocalTarget(CausalLM(t)), pair.target_tok, prompt, max_new_tokens=20)
    remote = RemoteTarget(server.url, TOKEN, SamplingConfig())
    out = generate_speculative(d, remote, pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(4), max_new_tokens=20)
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
    (b'{"prompt_ids": [1], "mode": "\xff\xfe"}', "bad_request"),  # invalid UTF-8
    (b"[" * 100_000 + b"]" * 100_000, "bad_request"),  # deep nesting
    ({"prompt_ids": [1], "sampling": {"temperature": 1e-300}}, "bad_request"),  # degenerate
    ({"prompt_ids": [1], "sampling": {"temperature": 1.0, "seed": 2**64}}, "bad_request"),
    ({"prompt_ids": [1], "sampling": {"temperature": 1.0, "seed": -1}}, "bad_request"),
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


def test_the_windows_last_position_is_usable(models, server):
    # a prompt one token short of the window: each empty proposal is one plain target step,
    # answered as the target in process answers it, until no position is left
    n = server.app.app.state.manager.max_length
    prompt = [(7 * i) % 1000 + 5 for i in range(n - 1)]
    status, out = _open(server, prompt_ids=prompt)
    assert status == 200, out
    path = f"/v1/sessions/{out['session']}/verify"
    local = LocalTarget(CausalLM(models[1]), SamplingConfig())
    local.start(prompt)
    status, err = server.raw("POST", path, {"round": 0, "proposal": [5, 6]})
    assert (status, err["error"]["code"]) == (400, "context_full") and "at most 1 proposal" in err["error"]["message"]
    for rnd in range(2):
        status, out = server.raw("POST", path, {"round": rnd, "proposal": []})
        assert status == 200 and out["token"] == local.verify([]).token, out
    status, err = server.raw("POST", path, {"round": 2, "proposal": []})
    assert (status, err["error"]["code"]) == (400, "context_full")
    assert server.raw("DELETE", path.rsplit("/", 1)[0])[0] == 200


def _headers_only(server, method, path, headers, body=b"", read_timeout=3.0):
    """Send headers (and maybe a partial body) and read the answer: the gate must answer
    without waiting for the rest of the body."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=read_timeout)
    conn.putrequest(method, path)
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.endheaders()
    if body:
        conn.send(body)
    resp = conn.getresponse()
    out = json.loads(resp.read() or b"{}")
    conn.close()
    return resp.status, out


def test_payload_limits(server):
    status, out = _headers_only(server, "POST", "/v1/sessions",
                                {"Authorization": f"Bearer {TOKEN}", "Content-Length": str(9 << 20)})
    assert status == 413 and out["error"]["code"] == "payload_too_large"
    status, _ = _headers_only(server, "POST", "/v1/sessions",
                              {"Authorization": f"Bearer {TOKEN}", "Transfer-Encoding": "chunked"}, b"0\r\n\r\n")
    assert status == 411


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
    ref = generate_ar(LocalTarget(CausalLM(t)), pair.target_tok, prompt, max_new_tokens=12)
    dead = RemoteTarget(f"http://127.0.0.1:{_free_port()}", TOKEN, SamplingConfig(), retries=0, timeout=1)
    with pytest.raises(OmniDraftError, match="unreachable"):
        dead.start([1, 2])
    target = FallbackTarget(dead, LocalTarget(CausalLM(t), SamplingConfig()))
    target.start([1])  # falls back at once
    assert target.fell_back
    # through the decode loop: equal output to the target's own
    dead2 = RemoteTarget(f"http://127.0.0.1:{_free_port()}", TOKEN, SamplingConfig(), retries=0, timeout=1)
    fb = FallbackTarget(dead2, LocalTarget(CausalLM(t), SamplingConfig()))
    out = generate_speculative(d, fb, pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(3), max_new_tokens=12)
    assert out.token_ids == ref.token_ids


# ---------------------------------------------------------------- hardening (#17)
def test_every_route_authenticates_and_docs_are_off(server):
    for path in ("/docs", "/redoc", "/openapi.json", "/v1/health", "/nope"):
        assert server.raw("GET", path, token=None)[0] == 401, path
    for path in ("/docs", "/redoc", "/openapi.json", "/nope"):
        status, out = server.raw("GET", path)
        assert status == 404 and out["error"]["code"] == "not_found", (path, out)
    status, out = server.raw("PUT", "/v1/health", {})
    assert status == 405 and "error" in out


def test_authentication_runs_before_the_body_is_read(server):
    """An unauthenticated client that declares 1.5 MB and sends 10 bytes is answered at once."""
    t0 = time.monotonic()
    status, out = _headers_only(server, "POST", "/v1/sessions", {"Content-Length": str(1_500_000)}, b"{" * 10)
    assert status == 401 and out["error"]["code"] == "unauthorized"
    assert time.monotonic() - t0 < 2.0


def test_rate_limit_runs_before_authentication(models):
    s = Server(models[1], ServerLimits(rate_per_s=1, burst=3))
    try:
        codes = [s.raw("GET", "/v1/health", token=None)[0] for _ in range(6)]
        assert codes[:3] == [401] * 3 and set(codes[3:]) == {429}
    finally:
        s.stop()


def test_rate_limit_buckets_are_evicted():
    from omnidraft.remote.gate import RateLimit

    rate = RateLimit(rate=1e6, burst=5, max_clients=100)
    for i in range(5000):
        assert rate.allow(f"10.0.{i // 256}.{i % 256}")
    assert len(rate.buckets) <= 100


def test_failed_requests_leave_the_session_unchanged_and_replays_must_match(server):
    status, out = server.raw("POST", "/v1/sessions", {"prompt_ids": [1, 2, 3], "mode": "rejection",
                                                      "sampling": {"temperature": 1.0, "seed": 3}})
    assert status == 200
    sid, manager = out["session"], server.app.app.state.manager
    path = f"/v1/sessions/{sid}/verify"
    length = manager.sessions[sid].target.model.length
    bad = [{"round": 0, "proposal": [5, 6]},  # rejection mode without q
           {"round": 0, "proposal": [5], "q": [{"ids": "!!", "probs": ""}]},
           {"round": 0, "proposal": [5], "q": [{"ids": _b64([5], "<i4"), "probs": _b64([2.0], "<f4")}]},
           {"round": 0, "proposal": [5], "q": [{"ids": _b64([10**8], "<i4"), "probs": _b64([1.0], "<f4")}]}]
    for body in bad:
        status, err = server.raw("POST", path, body)
        assert 400 <= status < 500 and "error" in err, (body, err)
        assert manager.sessions[sid].target.model.length == length
    good = {"round": 0, "proposal": [5], "q": [{"ids": _b64([5], "<i4"), "probs": _b64([1.0], "<f4")}]}
    first = server.raw("POST", path, good)
    assert first[0] == 200 and server.raw("POST", path, good) == first  # an identical retry
    other = {"round": 0, "proposal": [6], "q": [{"ids": _b64([6], "<i4"), "probs": _b64([1.0], "<f4")}]}
    status, err = server.raw("POST", path, other)
    assert (status, err["error"]["code"]) == (409, "replay_mismatch")
    server.raw("DELETE", f"/v1/sessions/{sid}")


def _b64(values, dtype):
    import base64

    import numpy as np

    return base64.b64encode(np.array(values, dtype=dtype).tobytes()).decode()


def test_session_and_cache_caps_hold_under_concurrent_opens(models):
    s = Server(models[1], ServerLimits(max_sessions=3, max_cache_tokens=100, burst=10_000, rate_per_s=10_000))
    try:
        def burst(prompt_len, n):
            codes = []
            threads = [threading.Thread(target=lambda: codes.append(
                s.raw("POST", "/v1/sessions", {"prompt_ids": list(range(1, prompt_len + 1))})[0])) for _ in range(n)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            return codes
        codes = burst(5, 10)
        assert codes.count(200) == 3 and codes.count(503) == 7
        manager = s.app.app.state.manager
        manager.sessions.clear()
        codes = burst(30, 8)  # 3 x 30 fit in 100 cache tokens, a fourth does not
        assert codes.count(200) == 3 and manager.cache_tokens() <= 100
    finally:
        s.stop()


def test_a_failed_prefill_leaves_no_session(models, monkeypatch):
    from omnidraft.remote.server import OpenIn, SessionManager

    manager = SessionManager(models[1], "tiny", ServerLimits())
    monkeypatch.setattr(LocalTarget, "start",
                        lambda self, ids, record_topk=0: (_ for _ in ()).throw(RuntimeError("oom")))
    with pytest.raises(RuntimeError):
        manager.open(OpenIn(prompt_ids=[1, 2, 3]))
    assert manager.sessions == {} and manager.cache_tokens() == 0


def test_health_answers_during_a_long_prefill(models, monkeypatch):
    s = Server(models[1], ServerLimits(burst=10_000, rate_per_s=10_000))
    real = LocalTarget.start

    def slow(self, ids, record_topk=0):
        time.sleep(2.0)
        real(self, ids, record_topk)
    monkeypatch.setattr(LocalTarget, "start", slow)
    try:
        opener = threading.Thread(target=lambda: s.raw("POST", "/v1/sessions", {"prompt_ids": [1, 2]}))
        opener.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        assert s.raw("GET", "/v1/health")[0] == 200
        assert time.monotonic() - t0 < 0.5
        opener.join()
    finally:
        s.stop()


class _Liar:
    """A loopback HTTP server answering every request with a fixed status and body."""

    def __init__(self, status, body: bytes):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *a):
                pass
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()


@pytest.mark.parametrize("status,body,error", [
    (200, b"x" * ((16 << 20) + 10), "over"),
    (200, b"[1, 2]", "not a JSON object"),
    (200, json.dumps({"session": "s", "round": 0, "accepted": 7, "token": 1}).encode(), "invalid verify reply"),
    (200, json.dumps({"session": "s", "round": 0, "accepted": 0, "token": 10**9}).encode(), "invalid verify reply"),
    (404, b'{"error": {"code": "unknown_session", "message": "expired"}}', "unknown_session"),
    (413, b'{"error": {"code": "payload_too_large", "message": "big"}}', "payload_too_large"),
    (503, b'{"error": {"code": "at_capacity", "message": "full"}}', "at_capacity"),
    (502, b"<html>bad gateway</html>", "unreachable"),  # a proxy's page: retried, then unavailable
])
def test_client_bounds_and_checks_replies(status, body, error):
    from omnidraft.remote.remote import BadReply, RemoteUnavailable

    liar = _Liar(status, body)
    try:
        t = RemoteTarget(liar.url, TOKEN, SamplingConfig(), retries=0)
        t._info = {"vocab_size": 1000, "max_length": 64, "model": "x", "eos_ids": []}
        t.session = "s"
        want = RemoteUnavailable if status in (404, 413, 502, 503) else BadReply
        with pytest.raises(want, match=error):
            t.verify([1, 2])
    finally:
        liar.stop()


def test_fallback_mid_generation_after_the_session_expires(models, server):
    d, t, pair = models
    prompt = "def add(a, b):\n"
    ref = generate_ar(LocalTarget(CausalLM(t)), pair.target_tok, prompt, max_new_tokens=20)
    manager = server.app.app.state.manager
    remote = RemoteTarget(server.url, TOKEN, SamplingConfig(), "point-mass")
    fb = FallbackTarget(remote, LocalTarget(CausalLM(t), SamplingConfig(), "point-mass", stream="fallback"))
    chunks = stream_speculative(d, fb, pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(3), max_new_tokens=20)
    next(chunks)  # the first round went through the server
    assert not fb.fell_back
    manager.sessions.clear()  # the server forgets the session: the next verify gets a 404
    while True:
        try:
            next(chunks)
        except StopIteration as done:
            out = done.value
            break
    assert fb.fell_back and out.token_ids == ref.token_ids


def test_remote_reports_the_models_eos_ids(models):
    """The served model's generation-config EOS (not the tokenizer's) stops a remote generation
    where `ar` stops."""
    _, t, pair = models
    prompt = "def add(a, b):\n"
    ref = generate_ar(LocalTarget(CausalLM(t)), pair.target_tok, prompt, max_new_tokens=12).token_ids
    stop_at = ref[4]
    assert stop_at not in ref[:4]
    t2 = copy.deepcopy(t)
    t2.generation_config.eos_token_id = [stop_at]
    s = Server(t2)
    try:
        remote = RemoteTarget(s.url, TOKEN, SamplingConfig())
        assert remote.eos_ids == {stop_at}
        out = generate_speculative(models[0], remote, pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(3),
                                   max_new_tokens=12)
        assert out.token_ids == generate_ar(LocalTarget(CausalLM(t2)), pair.target_tok, prompt,
                                            max_new_tokens=12).token_ids
        assert out.token_ids == ref[:5]
    finally:
        s.stop()


@pytest.mark.parametrize("strategy,mode", [("tli", "rejection"), ("omnidraft", "point-mass"),
                                           ("slem", "point-mass"), ("slrs", "rejection")])
def test_sampling_through_the_server_equals_in_process(models, server, strategy, mode):
    """Sampling end to end: the server derives the same verify stream from the seed, so a remote
    generation equals the in-process one draw for draw (tli with k=6 sends six q' rows)."""
    d, t, pair = models
    sampling = SamplingConfig(temperature=0.7, seed=11)
    cfg = SpecConfig(strategy)
    local = generate_speculative(d, LocalTarget(CausalLM(t), sampling, mode), pair, "def add(a, b):", cfg=cfg,
                                 k=FixedK(6), max_new_tokens=16)
    remote = RemoteTarget(server.url, TOKEN, sampling, mode)
    out = generate_speculative(d, remote, pair, "def add(a, b):", cfg=cfg, k=FixedK(6), max_new_tokens=16)
    assert out.token_ids == local.token_ids and out.lossless
    remote.close()
