"""The server's errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

A client's mistake is a 4xx with ``x-should-retry: false`` (the official SDKs then give up at
once); a wait the client may retry (the queue is full, the models are still loading) says so
with ``Retry-After``. Knows HTTP statuses; nothing about models.
"""

from __future__ import annotations

import json

TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
         405: "invalid_request_error", 411: "invalid_request_error", 413: "invalid_request_error",
         415: "invalid_request_error", 429: "rate_limit_error", 503: "service_unavailable_error"}


class ApiError(Exception):
    """``status`` with ``message``; ``param``: the request field at fault; ``retry_after``: seconds
    (a retryable wait)."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.retry_after = status, message, param, code, retry_after

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}

    def headers(self) -> list[tuple[bytes, bytes]]:
        retry = self.retry_after is not None
        out = [(b"content-type", b"application/json"), (b"x-should-retry", b"true" if retry else b"false")]
        if retry:
            out.append((b"retry-after", str(self.retry_after).encode()))
        return out


def bad(param: str | None, message: str, code: str = "invalid_value") -> ApiError:
    """A 400 naming the request field at fault."""
    return ApiError(400, f"{param}: {message}" if param else message, param=param, code=code)


async def send(send_, err: ApiError) -> None:
    """Answer an ASGI request with ``err``."""
    body = json.dumps(err.body()).encode()
    await send_({"type": "http.response.start", "status": err.status,
                 "headers": err.headers() + [(b"content-length", str(len(body)).encode())]})
    await send_({"type": "http.response.body", "body": body})
