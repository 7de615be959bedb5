"""The device's HTTP client for cloud targets: JSON over one keep-alive connection with a bearer
token, timeouts, idempotent retries with backoff, bounded replies, and a simulated network delay
(``rtt_ms``, for benchmarks; labelled simulated wherever it is reported).

A server that cannot serve this generation any more (unreachable after the retries, 404, 413,
429 after retries, 503) raises RemoteUnavailable, which remote/remote.py's FallbackTarget turns
into a switch to a local target. Knows HTTP; nothing about what the JSON means.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from typing import Iterator

from omnidraft.errors import OmniDraftError


class RemoteUnavailable(OmniDraftError):
    pass


class BadReply(OmniDraftError):
    pass


MAX_REPLY_BYTES = 16 << 20
FALLBACK_STATUSES = (404, 413, 503)  # the server can no longer serve this generation


class JsonClient:
    def __init__(self, url: str, token: str, *, timeout: float = 30.0, retries: int = 3, rtt_ms: float = 0.0):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OmniDraftError(f"bad target URL {url!r}", "use http://HOST:PORT")
        self.url, self.parts, self.token = url, parts, token
        self.timeout, self.retries, self.rtt_ms = timeout, retries, rtt_ms
        self.conn: http.client.HTTPConnection | None = None
        self.requests = 0  # answered requests

    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.parts.scheme == "https" else http.client.HTTPConnection
        return cls(self.parts.hostname, self.parts.port, timeout=self.timeout)

    def _drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def _exchange(self, method: str, path: str, body: dict | None, *, stream: bool = False):
        """Send ``method path`` (appended to the URL's own path) until a reply that is not worth
        retrying arrives: (response, its bytes; None with ``stream``: the caller reads it)."""
        data = json.dumps(body).encode() if body is not None else b""
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                   "Content-Length": str(len(data))}
        if stream:
            headers["Accept"] = "text/event-stream"
        full = self.parts.path.rstrip("/") + path
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(2.0, 0.1 * 2 ** attempt))
            try:
                if self.conn is None:
                    self.conn = self._connect()
                if self.rtt_ms:
                    time.sleep(self.rtt_ms / 1000.0)  # simulated network round trip
                self.conn.request(method, full, body=data, headers=headers)
                resp = self.conn.getresponse()
                payload = None if stream else resp.read(MAX_REPLY_BYTES + 1)
                self.requests += 1
            except (OSError, http.client.HTTPException, socket.timeout) as err:
                last = err
                self._drop()
                continue
            if payload is not None and len(payload) > MAX_REPLY_BYTES:
                self._drop()
                raise BadReply(f"target server reply over {MAX_REPLY_BYTES} bytes", "check the server URL")
            if (resp.status >= 500 and resp.status != 503) or resp.status == 429:
                if stream:
                    resp.read(MAX_REPLY_BYTES)
                last = RuntimeError(f"server answered {resp.status}")
                continue
            return resp, payload
        raise RemoteUnavailable(f"cloud target {self.url} unreachable after {self.retries + 1} tries "
                                f"({last})", "check the server and network, or configure a local fallback")

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        """The JSON object the server answers to ``method path`` (``path`` is appended to the URL's
        own path); OmniDraftError with the server's message for a refused request."""
        resp, payload = self._exchange(method, path, body)
        try:
            out = json.loads(payload or b"{}")
        except ValueError:
            out = None
        if resp.status >= 400:
            raise self._refusal(resp.status, out)
        if not isinstance(out, dict):
            raise BadReply(f"target server answered {resp.status} with a body that is not a JSON object",
                           "check the server URL")
        return out

    def events(self, path: str, body: dict) -> Iterator[dict]:
        """The JSON events of a server-sent-event reply to ``POST path`` (OpenAI streaming: ``data:
        {...}`` lines up to ``data: [DONE]``). Retried like ``call`` until the reply starts, not after."""
        resp, _ = self._exchange("POST", path, body, stream=True)
        if resp.status >= 400:
            try:
                out = json.loads(resp.read(MAX_REPLY_BYTES) or b"{}")
            except ValueError:
                out = None
            raise self._refusal(resp.status, out)
        try:
            for raw in resp:
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:"):].strip()
                if payload == "[DONE]":
                    return
                try:
                    event = json.loads(payload)
                except ValueError:
                    raise BadReply("the server's event stream holds a line that is not JSON",
                                   "check the server URL") from None
                if isinstance(event, dict):
                    yield event
        except (OSError, http.client.HTTPException, socket.timeout) as err:
            self._drop()
            raise RemoteUnavailable(f"cloud target {self.url} broke off a streamed reply ({err})",
                                    "check the server and network") from err
        finally:
            if not resp.isclosed():
                self._drop()  # a reply not read to its end cannot carry the next request

    @staticmethod
    def _refusal(status: int, out) -> OmniDraftError:
        err = out.get("error") if isinstance(out, dict) else None
        if isinstance(err, dict):
            detail = f"{err.get('code', '?')}): {err.get('message', '')}"
        else:  # FastAPI's {"detail": ...} (e.g. llama-cpp-python's server)
            detail = f"?): {str(out.get('detail', '') if isinstance(out, dict) else '')[:300]}"
        problem = f"target server refused the request ({status} {detail}"
        return RemoteUnavailable(problem) if status in FALLBACK_STATUSES else OmniDraftError(problem)
