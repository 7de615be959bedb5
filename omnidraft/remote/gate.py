"""The front gate of the target server, at the ASGI level: rate limit, bearer authentication and
the body-size limit run on every request, before any route is matched or any body byte is read,
so an unauthenticated client costs a header check and nothing more.

Errors leave in the server's schema ``{"error": {"code", "message"}}``. Knows HTTP headers and
ASGI; nothing about models or sessions.
"""

from __future__ import annotations

import hmac
import json
import threading
import time


async def send_error(send, status: int, code: str, message: str) -> None:
    """Answer with the server's error schema."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class RateLimit:
    """Token bucket per client address; buckets that have refilled are evicted, and the table
    never holds more than ``max_clients`` (the stalest go first)."""

    def __init__(self, rate: float, burst: int, max_clients: int = 10_000):
        self.rate, self.burst, self.max_clients = rate, burst, max_clients
        self.buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, last seen)
        self.lock = threading.Lock()
        self._calls = 0

    def _evict(self, now: float) -> None:
        full = [k for k, (tokens, last) in self.buckets.items()
                if tokens + (now - last) * self.rate >= self.burst]
        for k in full:
            del self.buckets[k]
        if len(self.buckets) >= self.max_clients:
            for k, _ in sorted(self.buckets.items(), key=lambda kv: kv[1][1])[: len(self.buckets) // 2]:
                del self.buckets[k]

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        with self.lock:
            self._calls += 1
            if self._calls % 1024 == 0 or len(self.buckets) >= self.max_clients:
                self._evict(now)
            tokens, last = self.buckets.get(key, (float(self.burst), now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            allowed = tokens >= 1
            self.buckets[key] = (tokens - 1 if allowed else tokens, now)
            return allowed


class Gate:
    """ASGI middleware in front of ``app``: 429 over the rate, 401 without the bearer token,
    411 for a body without a declared length, 413 for one over ``max_body`` bytes."""

    def __init__(self, app, token: str, rate: RateLimit, max_body: int):
        self.app, self.rate, self.max_body = app, rate, max_body
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        client = scope.get("client")
        if not self.rate.allow(client[0] if client else "?"):
            return await send_error(send, 429, "rate_limited", "too many requests; slow down")
        headers = dict(scope.get("headers") or [])
        if not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
            return await send_error(send, 401, "unauthorized", "missing or wrong bearer token")
        if scope["method"] in ("POST", "PUT", "PATCH"):
            declared = headers.get(b"content-length")
            if declared is None or not declared.isdigit():
                return await send_error(send, 411, "length_required", "send a Content-Length header")
            if int(declared) > self.max_body:
                return await send_error(send, 413, "payload_too_large", f"body over {self.max_body} bytes")
        return await self.app(scope, receive, send)
