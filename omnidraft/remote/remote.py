"""The device side of a cloud target: RemoteTarget speaks `omnidraft serve-target`'s JSON protocol
(remote/http.py carries it), and FallbackTarget continues on a local target when a cloud target
(this one or remote/openai_api.py's) is unreachable. Both satisfy the Target protocol of
decode/target.py.

Replies are checked (ids in the vocabulary, counts in range) before use. Knows the protocol.
"""

from __future__ import annotations

import base64

import torch

from omnidraft.errors import OmniDraftError
from omnidraft.sampling import SamplingConfig
from omnidraft.decode.verify import Verdict
from omnidraft.remote.http import BadReply, JsonClient, RemoteUnavailable

__all__ = ["BadReply", "FallbackTarget", "RemoteTarget", "RemoteUnavailable", "sparse_rows"]


def sparse_rows(q: torch.Tensor) -> list[dict]:
    """[m, V] q' -> the wire form: per row base64 int32 ids and float32 probs of its nonzeros."""
    rows = []
    for row in q:
        nz = row.nonzero().flatten()
        rows.append({"ids": base64.b64encode(nz.numpy().astype("<i4").tobytes()).decode(),
                     "probs": base64.b64encode(row[nz].numpy().astype("<f4").tobytes()).decode()})
    return rows


class RemoteTarget:
    def __init__(self, url: str, token: str, sampling: SamplingConfig, mode: str = "point-mass", *,
                 timeout: float = 30.0, retries: int = 3, rtt_ms: float = 0.0):
        self.http = JsonClient(url, token, timeout=timeout, retries=retries, rtt_ms=rtt_ms)
        self.sampling, self.mode = sampling, mode
        self.session: str | None = None
        self.round = 0
        self._info: dict | None = None
        self.last_rows: tuple[torch.Tensor, torch.Tensor] | None = None

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

    @property
    def eos_ids(self) -> set[int]:
        """The served model's generation-config EOS ids (the server reports them)."""
        return {int(e) for e in self.info().get("eos_ids", [])}

    @property
    def requests(self) -> int:
        return self.http.requests

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        return self.http.call(method, path, body)

    # ------------------------------------------------------------------ Target protocol
    def start(self, prompt_ids: list[int], record_topk: int = 0) -> None:
        if self.session:
            self.close()
        s = self.sampling
        self.last_rows = None
        out = self._call("POST", "/v1/sessions", {
            "prompt_ids": list(prompt_ids), "mode": self.mode, "record_topk": record_topk,
            "sampling": {"temperature": s.temperature, "top_p": s.top_p, "seed": s.seed}})
        if not isinstance(out.get("session"), str):
            raise BadReply("the target server sent an invalid session reply", "check the server version")
        self.session, self.round = out["session"], 0

    def verify(self, proposal: list[int], q: torch.Tensor | None = None) -> Verdict:
        body: dict = {"round": self.round, "proposal": list(proposal)}
        if self.needs_q and proposal:
            body["q"] = sparse_rows(q)
        out = self._call("POST", f"/v1/sessions/{self.session}/verify", body)
        verdict, rows = self._check_reply(out, len(proposal))
        self.round += 1
        self.last_rows = rows
        return verdict

    def _check_reply(self, out: dict, m: int):
        """(Verdict, rows or None) from a verify reply, or BadReply if it is not a valid one."""
        try:
            accepted, token = out["accepted"], out["token"]
            ok = (out.get("round") == self.round and type(accepted) is int and type(token) is int
                  and 0 <= accepted <= m and 0 <= token < self.vocab_size)
            rows = None
            if ok and "rows" in out:
                ids = torch.tensor(out["rows"]["ids"], dtype=torch.long)
                probs = torch.tensor(out["rows"]["probs"], dtype=torch.float32)
                ok = (ids.dim() == 2 and ids.shape == probs.shape and ids.shape[0] == accepted + 1
                      and bool(((ids >= 0) & (ids < self.vocab_size)).all()))
                rows = (ids, probs)
        except (KeyError, TypeError, ValueError, RuntimeError):
            ok = False
        if not ok:
            raise BadReply("the target server sent an invalid verify reply", "check the server version")
        return Verdict(accepted, token), rows

    def close(self) -> None:
        if self.session:
            try:
                self._call("DELETE", f"/v1/sessions/{self.session}")
            except OmniDraftError:
                pass
            self.session = None


class FallbackTarget:
    """Uses ``primary`` (remote) and, if it becomes unavailable (RemoteUnavailable: unreachable,
    expired session, 413, 503), continues on ``fallback`` (local) from the committed context:
    the output stays the target's. The fallback must verify in the primary's mode; build it with
    its own random stream (``LocalTarget(..., stream="fallback")``) so its draws do not repeat
    the server's."""

    def __init__(self, primary: RemoteTarget, fallback):
        if fallback.mode != primary.mode and not primary.sampling.greedy:
            raise OmniDraftError(f"fallback verifies by {fallback.mode}, the remote target by {primary.mode}",
                                 "build both with the same verify mode")
        self.primary, self.fallback = primary, fallback
        self.active = primary
        self.context: list[int] = []
        self.record_topk = 0
        self.fell_back = False

    @property
    def mode(self) -> str:
        return self.primary.mode

    @property
    def sampling(self) -> SamplingConfig:
        return self.primary.sampling

    @property
    def needs_q(self) -> bool:
        return self.active.needs_q

    @property
    def last_rows(self):
        return self.active.last_rows

    @property
    def eos_ids(self) -> set[int]:
        return self._fact("eos_ids")

    def _fact(self, name: str):
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
        self.fallback.start(self.context, self.record_topk)

    def start(self, prompt_ids: list[int], record_topk: int = 0) -> None:
        self.context, self.record_topk = list(prompt_ids), record_topk
        try:
            self.primary.start(prompt_ids, record_topk)
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
