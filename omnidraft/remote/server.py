"""The cloud target verification service (FastAPI): sessions that keep the target's KV cache,
verify proposals, and return accepted counts, the correction/bonus token and training rows.

Schema (JSON; every route needs ``Authorization: Bearer <token>``, checked before the body is
read; there are no unauthenticated docs routes):
  POST   /v1/sessions                  {prompt_ids, sampling{temperature, top_p, seed}, mode,
                                        record_topk}  -> {session, vocab_size, max_length, eos_ids}
  POST   /v1/sessions/{session}/verify {round, proposal, q?: [{ids, probs}] per position}
                                        -> {round, accepted, token, rows?: {ids, probs}}
         q rows (rejection mode only) are sparse: ``ids`` little-endian int32 and ``probs``
         little-endian float32, each base64-encoded.
  DELETE /v1/sessions/{session}        -> {closed: true}
  GET    /v1/health                    -> {ok, model, sessions, vocab_size, max_length, eos_ids}
Errors are 4xx/5xx with {"error": {"code", "message"}}; a client's mistake is always a 4xx and
leaves its session as it was. ``round`` makes retries idempotent: the same round with the same
body sent again gets the stored reply and is applied once; the same round with another body is
a 409. Session ids are 192-bit random capabilities, so one client can neither read nor advance
another's session. Knows HTTP, sessions and limits; verification itself is LocalTarget's.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from omnidraft.errors import OmniDraftError
from omnidraft.models.eager import CausalLM
from omnidraft.sampling import MAX_SEED, SamplingConfig
from omnidraft.remote.gate import Gate, RateLimit
from omnidraft.decode.target import LocalTarget
from omnidraft.decode.text import generation_eos_ids


@dataclass(frozen=True)
class ServerLimits:
    max_sessions: int = 16
    session_ttl_s: float = 600.0
    max_cache_tokens: int = 65536  # KV-cache tokens summed over all sessions
    max_body_bytes: int = 8 << 20  # q' rows of a k=8 tli rejection proposal fit (~0.4 MB each)
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
    seed: int | None = Field(None, ge=0, le=MAX_SEED)


class OpenIn(_Strict):
    prompt_ids: list[int] = Field(min_length=1)
    sampling: SamplingIn = SamplingIn()
    mode: Literal["rejection", "point-mass"] = "point-mass"
    record_topk: int = Field(0, ge=0)


class SparseRow(_Strict):
    ids: str  # base64 of [n] little-endian int32 target ids with q' > 0
    probs: str  # base64 of [n] little-endian float32 q' of those ids


class VerifyIn(_Strict):
    round: int = Field(ge=0)
    proposal: list[int]
    q: list[SparseRow] | None = None


def parse(model: type[BaseModel], body: bytes) -> BaseModel:
    """A request body as ``model``; any malformed JSON (invalid UTF-8, deep nesting, wrong types)
    is a 400 in the server's schema."""
    try:
        return model.model_validate_json(body)
    except ValidationError as err:
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise ApiError(400, "bad_request", f"{where or 'body'}: {first.get('msg', 'invalid request')}")


def _fingerprint(req: "VerifyIn") -> str:
    return hashlib.sha256(req.model_dump_json().encode()).hexdigest()


@dataclass
class _Session:
    target: LocalTarget
    record_topk: int
    reserved: int  # cache tokens counted for the session before its prefill has run
    round: int = 0
    last_reply: dict | None = None
    last_request: str | None = None  # fingerprint of the request that produced last_reply
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)


class SessionManager:
    """Sessions over one shared model; a global lock serialises forwards (one CPU model)."""

    def __init__(self, model: torch.nn.Module, name: str, limits: ServerLimits):
        self.model, self.name, self.limits = model, name, limits
        self.sessions: dict[str, _Session] = {}
        self.lock = threading.Lock()  # the session table and the cache-token budget
        self.model_lock = threading.Lock()
        probe = CausalLM(model, name)
        self.vocab_size, self.max_length = probe.vocab_size, probe.max_length
        self.eos_ids = sorted(generation_eos_ids(getattr(model, "generation_config", None)))

    def facts(self) -> dict:
        return {"vocab_size": self.vocab_size, "max_length": self.max_length, "eos_ids": self.eos_ids}

    def _expire(self) -> None:
        now = time.monotonic()
        for sid in [s for s, v in self.sessions.items() if now - v.last_used > self.limits.session_ttl_s]:
            del self.sessions[sid]

    def cache_tokens(self) -> int:
        """KV-cache tokens held or reserved by all sessions (call with ``self.lock`` held)."""
        return sum(max(s.target.model.length + 1, s.reserved) for s in self.sessions.values())

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
        try:
            sampling = SamplingConfig(temperature=s.temperature, top_p=s.top_p, seed=s.seed)
        except OmniDraftError as err:
            raise ApiError(400, "bad_request", f"sampling: {err}")
        target = LocalTarget(CausalLM(self.model, self.name), sampling, req.mode)
        with self.lock:  # check and register in one step: concurrent opens cannot overshoot
            self._expire()
            if len(self.sessions) >= self.limits.max_sessions:
                raise ApiError(503, "at_capacity", f"{self.limits.max_sessions} sessions open; retry later")
            if self.cache_tokens() + len(req.prompt_ids) > self.limits.max_cache_tokens:
                raise ApiError(503, "at_capacity", "KV-cache memory cap reached; retry later")
            sid = secrets.token_urlsafe(24)
            self.sessions[sid] = session = _Session(target, req.record_topk, len(req.prompt_ids))
        try:
            with session.lock, self.model_lock:
                target.start(req.prompt_ids, req.record_topk)
        except BaseException:
            with self.lock:  # a failed prefill leaves no session behind
                self.sessions.pop(sid, None)
            raise
        return {"session": sid, **self.facts()}

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
                if _fingerprint(req) != session.last_request:
                    raise ApiError(409, "replay_mismatch", f"round {req.round} was already verified "
                                   "with a different body")
                return session.last_reply  # a retried request: applied once, answered again
            if req.round != session.round:
                raise ApiError(409, "wrong_round", f"expected round {session.round}, got {req.round}")
            m = len(req.proposal)
            if m > self.limits.max_proposal:
                raise ApiError(400, "proposal_too_long", f"{m} tokens; at most {self.limits.max_proposal}")
            self._check_ids(req.proposal, "proposal")
            target = session.target
            room = target.room()
            if m > room:
                raise ApiError(400, "context_full", f"the session reached the context window ({self.max_length} "
                               "tokens)" + (f": at most {room} proposal tokens fit" if room >= 0 else ""))
            with self.lock:
                if self.cache_tokens() + m > self.limits.max_cache_tokens:
                    raise ApiError(503, "at_capacity", "KV-cache memory cap reached; retry later")
            q = None
            if target.needs_q and m:
                q = self._dense_q(req.q, m)
            try:
                with self.model_lock:
                    verdict = target.verify(req.proposal, q)  # rolls its cache back on failure
            except ValueError as err:
                raise ApiError(400, "bad_request", str(err))
            reply = {"round": req.round, "accepted": verdict.accepted, "token": verdict.token}
            if session.record_topk and target.last_rows is not None:
                ids, probs = target.last_rows
                reply["rows"] = {"ids": ids.tolist(), "probs": [[round(x, 6) for x in r] for r in probs.tolist()]}
            session.round += 1
            session.last_reply, session.last_request = reply, _fingerprint(req)
            return reply

    def _dense_q(self, rows: list[SparseRow] | None, m: int) -> torch.Tensor:
        """[m, V] q' from the sparse base64 rows; every malformed row is a 400."""
        if rows is None or len(rows) != m:
            raise ApiError(400, "bad_q", f"rejection sampling needs q for each of the {m} proposed tokens")
        q = torch.zeros(m, self.vocab_size)
        for i, row in enumerate(rows):
            try:
                ids = np.frombuffer(base64.b64decode(row.ids, validate=True), dtype="<i4")
                probs = np.frombuffer(base64.b64decode(row.probs, validate=True), dtype="<f4")
            except ValueError:
                raise ApiError(400, "bad_q", f"q row {i}: ids and probs must be base64 of int32 / float32")
            if len(ids) != len(probs):
                raise ApiError(400, "bad_q", f"q row {i}: ids and probs differ in length")
            if len(ids) and (ids.min() < 0 or ids.max() >= self.vocab_size):
                raise ApiError(400, "bad_token", f"q row {i}: ids must be in 0..{self.vocab_size - 1}")
            if not np.all((probs >= 0.0) & (probs <= 1.0)):  # also refuses NaN
                raise ApiError(400, "bad_q", f"q row {i}: probabilities must be in [0, 1]")
            q[i, torch.from_numpy(ids.astype(np.int64))] = torch.from_numpy(probs.copy())
        return q

    def close(self, sid: str) -> dict:
        with self.lock:
            if self.sessions.pop(sid, None) is None:
                raise ApiError(404, "unknown_session", "unknown or expired session")
        return {"closed": True}


def create_app(model: torch.nn.Module, name: str, token: str, limits: ServerLimits = ServerLimits()):
    """The ASGI app serving ``model`` as a verification target. ``token``: the bearer secret."""
    if not token or len(token) < 16:
        raise OmniDraftError("the server token must be at least 16 characters",
                             "set OMNIDRAFT_TOKEN or pass --token-file")
    manager = SessionManager(model, name, limits)
    app = FastAPI(title="OmniDraft target verification", version="1",
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.state.manager = manager

    @app.exception_handler(ApiError)
    async def _api_error(_, err: ApiError):
        return JSONResponse({"error": {"code": err.code, "message": err.message}}, status_code=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_, err: StarletteHTTPException):  # unknown route, wrong method
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "bad_request")
        return JSONResponse({"error": {"code": code, "message": str(err.detail)}}, status_code=err.status_code)

    @app.get("/v1/health")
    async def health():  # never waits for the model: answers during a long prefill
        return {"ok": True, "model": name, "sessions": len(manager.sessions), **manager.facts()}

    @app.post("/v1/sessions")
    async def open_session(request: Request):
        req = parse(OpenIn, await request.body())
        return await run_in_threadpool(manager.open, req)

    @app.post("/v1/sessions/{sid}/verify")
    async def verify(sid: str, request: Request):
        req = parse(VerifyIn, await request.body())
        return await run_in_threadpool(manager.verify, sid, req)

    @app.delete("/v1/sessions/{sid}")
    async def close(sid: str):
        return manager.close(sid)

    return Gate(app, token, RateLimit(limits.rate_per_s, limits.burst), limits.max_body_bytes)
