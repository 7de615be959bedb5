"""The cloud target verification service (FastAPI): sessions that keep the target's KV cache,
verify proposals, and return accepted counts, the correction/bonus token and training rows.

Schema (JSON; all requests need ``Authorization: Bearer <token>``):
  POST   /v1/sessions                  {prompt_ids, sampling{temperature, top_p, seed}, mode,
                                        record_topk}  -> {session, vocab_size, max_length}
  POST   /v1/sessions/{session}/verify {round, proposal, q?: [{ids, probs}] per position}
                                        -> {round, accepted, token, rows?: {ids, probs}}
  DELETE /v1/sessions/{session}        -> {closed: true}
  GET    /v1/health                    -> {ok, model, sessions, vocab_size, max_length}
Errors are 4xx/5xx with {"error": {"code", "message"}}. ``round`` makes retries idempotent: the
same round sent again gets the stored reply and is applied once. Session ids are 192-bit
random capabilities, so one client can neither read nor advance another's session.
Knows HTTP, sessions and limits; verification itself is LocalTarget's.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

import torch
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from .errors import OmniDraftError
from .runtime import CausalLM
from .sampling import SamplingConfig
from .target import LocalTarget


@dataclass(frozen=True)
class ServerLimits:
    max_sessions: int = 16
    session_ttl_s: float = 600.0
    max_cache_tokens: int = 65536  # KV-cache tokens summed over all sessions
    max_body_bytes: int = 2 << 20
    max_proposal: int = 32
    max_topk: int = 128
    rate_per_s: float = 100.0  # requests per second per client address (token bucket)
    burst: int = 200

    def __post_init__(self):
        for name in ("max_sessions", "max_cache_tokens", "max_body_bytes", "max_proposal", "burst"):
            if getattr(self, name) < 1:
                raise OmniDraftError(f"ServerLimits.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("session_ttl_s", "rate_per_s"):
            if getattr(self, name) <= 0:
                raise OmniDraftError(f"ServerLimits.{name} must be > 0, got {getattr(self, name)}")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str):
        self.status, self.code, self.message = status, code, message


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SamplingIn(_Strict):
    temperature: float = Field(0.0, ge=0.0, le=100.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None


class OpenIn(_Strict):
    prompt_ids: list[int] = Field(min_length=1)
    sampling: SamplingIn = SamplingIn()
    mode: Literal["rejection", "point-mass"] = "point-mass"
    record_topk: int = Field(0, ge=0)


class SparseRow(_Strict):
    ids: list[int]  # [n] target ids with q' > 0
    probs: list[float]  # [n] their q'


class VerifyIn(_Strict):
    round: int = Field(ge=0)
    proposal: list[int]
    q: list[SparseRow] | None = None


@dataclass
class _Session:
    target: LocalTarget
    record_topk: int
    round: int = 0
    last_reply: dict | None = None
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)


class SessionManager:
    """Sessions over one shared model; a global lock serialises forwards (one CPU model)."""

    def __init__(self, model: torch.nn.Module, name: str, limits: ServerLimits):
        self.model, self.name, self.limits = model, name, limits
        self.sessions: dict[str, _Session] = {}
        self.lock = threading.Lock()  # the session table
        self.model_lock = threading.Lock()
        probe = CausalLM(model, name)
        self.vocab_size, self.max_length = probe.vocab_size, probe.max_length

    def _expire(self) -> None:
        now = time.monotonic()
        for sid in [s for s, v in self.sessions.items() if now - v.last_used > self.limits.session_ttl_s]:
            del self.sessions[sid]

    def cache_tokens(self) -> int:
        return sum(s.target.model.length + 1 for s in self.sessions.values())

    def _check_ids(self, ids: list[int], what: str) -> None:
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:
            raise ApiError(400, "bad_token", f"{what} id {bad} is outside 0..{self.vocab_size - 1}")

    def open(self, req: OpenIn) -> dict:
        self._check_ids(req.prompt_ids, "prompt")
        if len(req.prompt_ids) >= self.max_length:
            raise ApiError(400, "prompt_too_long", f"prompt has {len(req.prompt_ids)} tokens; the "
                           f"context window is {self.max_length}")
        if req.record_topk > self.limits.max_topk:
            raise ApiError(400, "bad_request", f"record_topk must be <= {self.limits.max_topk}")
        s = req.sampling
        target = LocalTarget(CausalLM(self.model, self.name),
                             SamplingConfig(temperature=s.temperature, top_p=s.top_p, seed=s.seed),
                             req.mode, req.record_topk)
        with self.lock:
            self._expire()
            if len(self.sessions) >= self.limits.max_sessions:
                raise ApiError(503, "at_capacity", f"{self.limits.max_sessions} sessions open; retry later")
            if self.cache_tokens() + len(req.prompt_ids) > self.limits.max_cache_tokens:
                raise ApiError(503, "at_capacity", "KV-cache memory cap reached; retry later")
            sid = secrets.token_urlsafe(24)
            self.sessions[sid] = session = _Session(target, req.record_topk)
        with session.lock, self.model_lock:
            target.start(req.prompt_ids)
        return {"session": sid, "vocab_size": self.vocab_size, "max_length": self.max_length}

    def _get(self, sid: str) -> _Session:
        with self.lock:
            self._expire()
            session = self.sessions.get(sid)
        if session is None:
            raise ApiError(404, "unknown_session", "unknown or expired session; open a new one")
        return session

    def verify(self, sid: str, req: VerifyIn) -> dict:
        session = self._get(sid)
        with session.lock:
            session.last_used = time.monotonic()
            if session.last_reply is not None and req.round == session.round - 1:
                return session.last_reply  # a retried request: applied once, answered again
            if req.round != session.round:
                raise ApiError(409, "wrong_round", f"expected round {session.round}, got {req.round}")
            m = len(req.proposal)
            if m > self.limits.max_proposal:
                raise ApiError(400, "proposal_too_long", f"{m} tokens; at most {self.limits.max_proposal}")
            self._check_ids(req.proposal, "proposal")
            target = session.target
            if target.model.length + m + 2 > self.max_length:
                raise ApiError(400, "context_full", "the session reached the context window")
            with self.lock:
                if self.cache_tokens() + m > self.limits.max_cache_tokens:
                    raise ApiError(503, "at_capacity", "KV-cache memory cap reached; retry later")
            q = None
            if target.needs_q:
                q = self._dense_q(req.q, m)
            with self.model_lock:
                verdict = target.verify(req.proposal, q)
            reply = {"round": req.round, "accepted": verdict.accepted, "token": verdict.token}
            if session.record_topk and target.last_rows is not None:
                ids, probs = target.last_rows
                reply["rows"] = {"ids": ids.tolist(), "probs": [[round(x, 6) for x in r] for r in probs.tolist()]}
            session.round += 1
            session.last_reply = reply
            return reply

    def _dense_q(self, rows: list[SparseRow] | None, m: int) -> torch.Tensor:
        if rows is None or len(rows) != m:
            raise ApiError(400, "bad_q", f"rejection sampling needs q for each of the {m} proposed tokens")
        q = torch.zeros(m, self.vocab_size)
        for i, row in enumerate(rows):
            if len(row.ids) != len(row.probs):
                raise ApiError(400, "bad_q", f"q row {i}: ids and probs differ in length")
            self._check_ids(row.ids, "q")
            if any(not 0.0 <= p <= 1.0 for p in row.probs):
                raise ApiError(400, "bad_q", f"q row {i}: probabilities must be in [0, 1]")
            q[i, torch.tensor(row.ids, dtype=torch.long)] = torch.tensor(row.probs)
        return q

    def close(self, sid: str) -> dict:
        with self.lock:
            if self.sessions.pop(sid, None) is None:
                raise ApiError(404, "unknown_session", "unknown or expired session")
        return {"closed": True}


class _BodyLimit:
    """ASGI middleware: a request body must declare its length (411) and stay under ``limit``
    bytes (413), checked before the body is read."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            declared = dict(scope.get("headers") or []).get(b"content-length")
            if declared is None or not declared.isdigit():
                return await _send_error(send, 411, "length_required", "send a Content-Length header")
            if int(declared) > self.limit:
                return await _send_error(send, 413, "payload_too_large", f"body over {self.limit} bytes")
        return await self.app(scope, receive, send)


async def _send_error(send, status: int, code: str, message: str) -> None:
    import json

    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class _RateLimit:
    """Token bucket per client address."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.burst = rate, burst
        self.buckets: dict[str, tuple[float, float]] = {}
        self.lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        with self.lock:
            tokens, last = self.buckets.get(key, (float(self.burst), now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1:
                self.buckets[key] = (tokens, now)
                return False
            self.buckets[key] = (tokens - 1, now)
            return True


def create_app(model: torch.nn.Module, name: str, token: str, limits: ServerLimits = ServerLimits()):
    """The FastAPI app serving ``model`` as a verification target. ``token``: the bearer secret."""
    if not token or len(token) < 16:
        raise OmniDraftError("the server token must be at least 16 characters",
                             "set OMNIDRAFT_TOKEN or pass --token-file")
    manager = SessionManager(model, name, limits)
    rate = _RateLimit(limits.rate_per_s, limits.burst)
    expected = token.encode()
    app = FastAPI(title="OmniDraft target verification", version="1")
    app.state.manager = manager

    def auth(request: Request, authorization: str | None = Header(default=None)) -> None:
        if not rate.allow(request.client.host if request.client else "?"):
            raise ApiError(429, "rate_limited", "too many requests; slow down")
        given = (authorization or "")
        if not given.startswith("Bearer ") or not hmac.compare_digest(given[7:].encode(), expected):
            raise ApiError(401, "unauthorized", "missing or wrong bearer token")

    @app.exception_handler(ApiError)
    async def _api_error(_, err: ApiError):
        return JSONResponse({"error": {"code": err.code, "message": err.message}}, status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_, err: RequestValidationError):
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return JSONResponse({"error": {"code": "bad_request",
                                       "message": f"{where or 'body'}: {first.get('msg', 'invalid request')}"}},
                            status_code=400)

    @app.get("/v1/health", dependencies=[Depends(auth)])
    def health():
        return {"ok": True, "model": name, "sessions": len(manager.sessions),
                "vocab_size": manager.vocab_size, "max_length": manager.max_length}

    @app.post("/v1/sessions", dependencies=[Depends(auth)])
    def open_session(req: OpenIn):
        return manager.open(req)

    @app.post("/v1/sessions/{sid}/verify", dependencies=[Depends(auth)])
    def verify(sid: str, req: VerifyIn):
        return manager.verify(sid, req)

    @app.delete("/v1/sessions/{sid}", dependencies=[Depends(auth)])
    def close(sid: str):
        return manager.close(sid)

    return _BodyLimit(app, limits.max_body_bytes)
