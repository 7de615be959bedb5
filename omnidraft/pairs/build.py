"""Names to runnable parts: the drafter on its runtime (eager PyTorch or the exported ExecuTorch
program), and the target (a local model, a remote `omnidraft serve-target`, or a remote one
that falls back to a local model) with its tokenizer.

Shared by the CLI and ``Session``; knows the loaders and runtimes, nothing about decoding.
"""

from __future__ import annotations

from omnidraft.decode.sampling import SamplingConfig
from omnidraft.errors import OmniDraftError
from omnidraft.models.lm import LM
from omnidraft.models.loading import load_model, load_tokenizer

DRAFTER_RUNTIMES = ("eager", "executorch")


def is_remote(target: str) -> bool:
    return target.startswith(("http://", "https://"))


def load_drafter(name: str, runtime: str = "eager", *, quant: str = "8da8w", max_seq: int = 1024,
                 specvocab_k: int = 0, adapter_ptd: str | None = None, dtype: str = "fp32") -> LM:
    """The drafter ``name`` on ``runtime``: ``executorch`` runs the program `omnidraft export`
    wrote for (quant, max_seq, specvocab_k) with ``adapter_ptd`` (default its zero adapter)."""
    if runtime not in DRAFTER_RUNTIMES:
        raise OmniDraftError(f"unknown drafter runtime {runtime!r}", f"use {' or '.join(DRAFTER_RUNTIMES)}")
    if runtime == "executorch":
        from omnidraft.device.runtime import ExecuTorchLM
        from omnidraft.export.layout import find_program

        return ExecuTorchLM(find_program(name, quant, max_seq, specvocab_k), adapter_ptd, name=name)
    return load_model(name, dtype=dtype)


def load_target(ref: str, *, sampling: SamplingConfig, verify: str, dtype: str = "bf16",
                token: str | None = None, tokenizer: str | None = None, fallback: str | None = None,
                record_topk: int = 0):
    """(target, its tokenizer). A local ``ref`` loads the model (the decode loop verifies it
    in-process); an http(s) URL is a RemoteTarget (bearer ``token``; ``tokenizer`` defaults to
    the fallback's, else the model name the server reports), wrapped to continue on the local
    model ``fallback`` when the server is unreachable."""
    if not is_remote(ref):
        return load_model(ref, dtype=dtype), load_tokenizer(tokenizer or ref)
    from omnidraft.decode.target import LocalTarget
    from omnidraft.serve.remote import FallbackTarget, RemoteTarget

    if not token:
        raise OmniDraftError("a remote target needs a bearer token", "pass token=... or set OMNIDRAFT_TOKEN")
    target = RemoteTarget(ref, token, sampling, verify, record_topk)
    name = tokenizer or fallback or target.info()["model"]
    if fallback:
        target = FallbackTarget(target, LocalTarget(load_model(fallback, dtype=dtype), sampling, verify,
                                                    record_topk, stream="fallback"))
    return target, load_tokenizer(name)
