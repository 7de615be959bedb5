"""The device side of a cloud target: RemoteTarget speaks the server's JSON protocol over HTTP
(keep-alive) with timeouts and idempotent retries, and FallbackTarget continues on a local
target when the cloud is unreachable. Both satisfy the Target protocol of target.py.

A simulated network delay (``rtt_ms``) can be injected in the client transport for
benchmarks; it is labelled simulated wherever it is reported. Knows HTTP and the protocol.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse

import torch

from .errors import OmniDraftError
from .sampling import SamplingConfig
from .verify import Verdict


class RemoteUnavailable(OmniDraftError):
    pass


class RemoteTarget:
    def __init__(self, url: str, token: str, sampling: SamplingConfig, mode: str = "point-mass",
                 record_topk: int = 0, *, timeout: float = 30.0, retries: int = 3, rtt_ms: float = 0.0):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OmniDraftError(f"bad target URL {url!r}", "use http://HOST:PORT")
        self.url, self.parts = url, parts
        self.token, self.sampling, self.mode, self.record_topk = token, sampling, mode, record_topk
        self.timeout, self.retries, self.rtt_ms = timeout, retries, rtt_ms
        self.conn: http.client.HTTPConnection | None = None
        self.session: str | None = None
        self.round = 0
        self.forwards = 0
        self._info: dict | None = None
        self.last_rows: tuple[torch.Tensor, torch.Tensor] | None = None
        self.requests = 0

    def info(self) -> dict:
        """The server's model facts (fetched once): vocab_size, max_length, model."""
        if self._info is None:
            self._info = self._call("GET", "/v1/health")
        return self._info

    @property
    def vocab_size(self) -> int:
        return int(self.info()["vocab_size"])

    @property
    def max_length(self) -> int:
        return int(self.info()["max_length"])

    @property
    def needs_q(self) -> bool:
        return not self.sampling.greedy and self.mode == "rejection"

    # ------------------------------------------------------------------ transport
    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.parts.scheme == "https" else http.client.HTTPConnection
        return cls(self.parts.hostname, self.parts.port, timeout=self.timeout)

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else b""
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                   "Content-Length": str(len(data))}
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(2.0, 0.1 * 2 ** attempt))
            try:
                if self.conn is None:
                    self.conn = self._connect()
                if self.rtt_ms:
                    time.sleep(self.rtt_ms / 1000.0)  # simulated network round trip
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                payload = resp.read()
                self.requests += 1
            except (OSError, http.client.HTTPException, socket.timeout) as err:
                last = err
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                continue
            try:
                out = json.loads(payload or b"{}")
            except ValueError:
                out = {}
            if resp.status >= 500 and resp.status != 503:
                last = RuntimeError(f"server error {resp.status}")
                continue
            if resp.status >= 400:
                err = out.get("error", {})
                raise OmniDraftError(f"target server refused the request ({resp.status} "
                                     f"{err.get('code', '?')}): {err.get('message', '')}")
            return out
        raise RemoteUnavailable(f"cloud target {self.url} unreachable after {self.retries + 1} tries "
                                f"({last})", "check the server and network, or configure a local fallback")

    # ------------------------------------------------------------------ Target protocol
    def start(self, prompt_ids: list[int]) -> None:
        if self.session:
            self.close()
        s = self.sampling
        out = self._call("POST", "/v1/sessions", {
            "prompt_ids": list(prompt_ids), "mode": self.mode, "record_topk": self.record_topk,
            "sampling": {"temperature": s.temperature, "top_p": s.top_p, "seed": s.seed}})
        self.session, self.round = out["session"], 0
        self.forwards += 1

    def verify(self, proposal: list[int], q: torch.Tensor | None = None) -> Verdict:
        body: dict = {"round": self.round, "proposal": list(proposal)}
        if self.needs_q:
            rows = []
            for row in q:  # [m, V] -> sparse rows of the nonzero entries
                nz = row.nonzero().flatten()
                rows.append({"ids": nz.tolist(), "probs": row[nz].tolist()})
            body["q"] = rows
        out = self._call("POST", f"/v1/sessions/{self.session}/verify", body)
        self.round += 1
        self.forwards += 1
        if "rows" in out:
            self.last_rows = (torch.tensor(out["rows"]["ids"]), torch.tensor(out["rows"]["probs"]))
        return Verdict(int(out["accepted"]), int(out["token"]))

    def close(self) -> None:
        if self.session:
            try:
                self._call("DELETE", f"/v1/sessions/{self.session}")
            except OmniDraftError:
                pass
            self.session = None


class FallbackTarget:
    """Uses ``primary`` (remote) and, if it becomes unreachable, continues on ``fallback``
    (local) from the committed context: the output stays the target's."""

    def __init__(self, primary: RemoteTarget, fallback):
        self.primary, self.fallback = primary, fallback
        self.active = primary
        self.context: list[int] = []
        self.fell_back = False

    def __getattr__(self, name):  # needs_q, last_rows, forwards
        return getattr(self.active, name)

    def _fact(self, name: str) -> int:
        try:
            return getattr(self.active, name)
        except RemoteUnavailable:
            return getattr(self.fallback, name)  # the same model, served locally

    @property
    def vocab_size(self) -> int:
        return self._fact("vocab_size")

    @property
    def max_length(self) -> int:
        return self._fact("max_length")

    def _switch(self) -> None:
        self.active, self.fell_back = self.fallback, True
        self.fallback.start(self.context)

    def start(self, prompt_ids: list[int]) -> None:
        self.context = list(prompt_ids)
        try:
            self.primary.start(prompt_ids)
            self.active = self.primary
        except RemoteUnavailable:
            self._switch()

    def verify(self, proposal: list[int], q: torch.Tensor | None = None) -> Verdict:
        try:
            verdict = self.active.verify(proposal, q)
        except RemoteUnavailable:
            self._switch()
            verdict = self.active.verify(proposal, q)
        self.context += list(proposal[: verdict.accepted]) + [verdict.token]
        return verdict
