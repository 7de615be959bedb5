"""The ASGI app of `omnidraft serve`: the pair behind OpenAI's API (Starlette).

  POST /v1/chat/completions, POST /v1/completions   streamed (SSE) or not
  GET  /v1/models, GET /v1/models/{id}              the one model served
  GET  /health                                      503 while loading, 200 when ready (no key)
  GET  /metrics                                     Prometheus text (serve/metrics.py)
  GET  /                                            the chat page (serve/page.html; no key: it asks)

With API keys, every /v1 route and /metrics need ``Authorization: Bearer KEY`` with one of them
(compared in constant time) before anything else is read; each key's generations recall from and
are remembered in a memory of their own (memory/: a client never receives proposals drawn from
another key's answers), unless the server shares one. Every client mistake is a 4xx in OpenAI's error
shape (serve/errors.py); a client that leaves stops its generation. Knows HTTP and the shapes of
requests and replies; generation is the Runner's (serve/runner.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from importlib import resources
from typing import AsyncIterator

import anyio

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from omnidraft.decode.generate import Piece, Result
from omnidraft.errors import OmniDraftError
from omnidraft.memory.spaces import LOCAL
from omnidraft.sampling import SamplingConfig
from omnidraft.serve import errors
from omnidraft.serve.errors import ApiError
from omnidraft.serve.metrics import prometheus
from omnidraft.serve.replies import Reply
from omnidraft.serve.requests import Ask, chat_request, completion_request, read_json, refuse_model
from omnidraft.serve.runner import Runner

PROTECTED = ("/v1/", "/metrics")
POLL_S = 0.2  # how often a request not yet streaming checks that its client is still there


@dataclass(frozen=True)
class Served:
    """What the app serves: the model's id, the keys (none: no key on loopback), the body bound,
    the sampling a request that names none gets, and whether every key shares one memory."""

    model: str
    api_keys: tuple[str, ...]
    max_body: int
    sampling: SamplingConfig
    shared_memory: bool = False


def memory_space(key: str | None, shared: bool = False) -> str:
    """The memory space a key's generations use (named by a hash: the key is never stored)."""
    if shared:
        return "shared"
    return LOCAL if key is None else "key-" + hashlib.sha256(key.encode()).hexdigest()[:16]


class _Gone(Exception):
    """The client disconnected."""


def create_app(runner: Runner, served: Served):
    """The ASGI app: routes behind the key check."""

    async def health(_request: Request):
        s = runner.session
        if s is None:
            state = ({"status": "error", "message": runner.failed} if runner.failed else
                     {"status": "loading", **({"stage": runner.stage} if runner.stage else {})})
            return JSONResponse(state, status_code=503)
        return JSONResponse({"status": "ok", "model": served.model, "slots": s.slots, "adapter": s.version,
                             "waiting": runner.waiting, "running": runner.running})

    async def models(_request: Request):
        return JSONResponse({"object": "list", "data": [_model(served.model)]})

    async def model(request: Request):
        if request.path_params["name"] != served.model:
            raise refuse_model(request.path_params["name"], served.model)
        return JSONResponse(_model(served.model))

    async def metrics(_request: Request):
        return PlainTextResponse(prometheus(runner, served.model), media_type="text/plain; version=0.0.4")

    async def page(_request: Request):
        return HTMLResponse(resources.files("omnidraft.serve").joinpath("page.html").read_text())

    async def chat(request: Request):
        return await _answer(request, chat_request(read_json(await _body(request, served.max_body))), True)

    async def completions(request: Request):
        return await _answer(request, completion_request(read_json(await _body(request, served.max_body))), False)

    async def _answer(request: Request, ask: Ask, is_chat: bool):
        if ask.model != served.model:
            raise refuse_model(ask.model, served.model)
        space = request.scope.get("state", {}).get("memory_space", memory_space(None, served.shared_memory))
        events = runner.generate(ask, _sampling(ask, served.sampling), space)
        reply = Reply(served.model, is_chat, ask.sources)
        try:
            first = await _next(events, request)
        except (_Gone, StopAsyncIteration):
            return Response(status_code=204)
        if ask.stream:
            return StreamingResponse(_sse(reply, first, events, ask.include_usage), media_type="text/event-stream",
                                     headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        pieces = []
        try:
            while isinstance(first, Piece):
                pieces.append(first)
                first = await _next(events, request)
        except _Gone:
            return Response(status_code=204)
        return JSONResponse(reply.whole(first, pieces))

    routes = [Route("/", page), Route("/health", health), Route("/metrics", metrics), Route("/v1/models", models),
              Route("/v1/models/{name:path}", model), Route("/v1/chat/completions", chat, methods=["POST"]),
              Route("/v1/completions", completions, methods=["POST"])]
    handlers = {ApiError: _api_error, 404: _not_found, 405: _not_allowed, Exception: _server_error}

    @asynccontextmanager
    async def lifespan(_app):
        runner.start()  # the Session loads in the background: /health answers 503 meanwhile
        yield

    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    return _Keyed(app, served.api_keys, served.shared_memory)


class _Keyed:
    """ASGI middleware: the key check on every protected path, before any route or body; the
    request's memory space in its scope's state."""

    def __init__(self, app, keys: tuple[str, ...], shared: bool):
        self.app = app
        self.expected = [(f"Bearer {key}".encode(), memory_space(key, shared)) for key in keys]

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self.expected and scope["path"].startswith(PROTECTED):
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            spaces = [space for expected, space in self.expected if hmac.compare_digest(given, expected)]
            if not spaces:
                return await errors.send(send, ApiError(401, "missing or incorrect API key (send Authorization: "
                                                        "Bearer KEY)", code="invalid_api_key"))
            scope.setdefault("state", {})["memory_space"] = spaces[0]
        return await self.app(scope, receive, send)


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise ApiError(413, f"the body is over {limit} bytes", code="body_too_large")
    size, chunks = 0, []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the body is over {limit} bytes", code="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _sampling(ask: Ask, default: SamplingConfig) -> SamplingConfig:
    try:
        return SamplingConfig(temperature=default.temperature if ask.temperature is None else ask.temperature,
                              top_p=default.top_p if ask.top_p is None else ask.top_p,
                              seed=default.seed if ask.seed is None else ask.seed)
    except OmniDraftError as err:
        raise ApiError(400, str(err), code="invalid_value") from None


async def _next(events: AsyncIterator, request: Request):
    """The next event, watching the client meanwhile: gone, the generation is closed (it stops
    within a round) and _Gone raised."""
    step = asyncio.ensure_future(events.__anext__())
    while True:
        done, _ = await asyncio.wait({step}, timeout=POLL_S)
        if done:
            return step.result()
        if await request.is_disconnected():
            step.cancel()
            with suppress(BaseException):
                await step
            await events.aclose()
            raise _Gone


async def _sse(reply: Reply, first: Piece | Result, events: AsyncIterator, include_usage: bool):
    """The event stream: OpenAI's chunks, ``data: [DONE]`` last. A client that leaves closes
    ``events`` (Starlette cancels this stream), which stops the generation."""
    try:
        opening = reply.opening()
        if opening:
            yield _event(opening)
        event = first
        while isinstance(event, Piece):
            yield _event(reply.chunk(event))
            event = await events.__anext__()
        yield _event(reply.closing(event))
        if include_usage:
            yield _event(reply.usage_chunk(event))
        yield b"data: [DONE]\n\n"
    except ApiError as err:  # after the stream began: the error as its last event
        yield _event(err.body())
    except Exception as err:  # noqa: BLE001  (a server fault after the stream began: said, not a dropped connection)
        yield _event({"error": {"message": f"internal error: {type(err).__name__}", "type": "server_error",
                                "param": None, "code": None}})
    finally:
        with anyio.CancelScope(shield=True):  # the client's leaving cancels this stream: stop the generation
            await events.aclose()


def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _model(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "omnidraft"}


async def _api_error(_request: Request, err: ApiError):
    return JSONResponse(err.body(), status_code=err.status, headers={k.decode(): v.decode()
                                                                     for k, v in err.headers()[1:]})


async def _not_found(request: Request, _err):
    return await _api_error(request, ApiError(404, f"no route {request.url.path}", code="not_found"))


async def _not_allowed(request: Request, _err):
    return await _api_error(request, ApiError(405, f"{request.method} is not allowed on {request.url.path}",
                                              code="method_not_allowed"))


async def _server_error(_request: Request, err: Exception):
    body = {"error": {"message": f"internal error: {type(err).__name__}", "type": "server_error", "param": None,
                      "code": None}}
    return JSONResponse(body, status_code=500)
