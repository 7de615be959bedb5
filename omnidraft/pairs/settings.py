"""The settings a Session is made from, grouped by what they describe: where the target is and
how to reach it (``TargetRef``), and how the parts run on this machine (``Runtime``). The CLI
builds both from argv; an app builds them in code. Each validates itself and names the bad field.

Knows names and ranges; loads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omnidraft.errors import OmniDraftError
from omnidraft.export.layout import QUANTS
from omnidraft.memory.config import DEFAULT_MIB
from omnidraft.models.budget import Budget
from omnidraft.models.loading import DTYPES
from omnidraft.pairs.spec import REMOTE_SCHEMES
from omnidraft.translate.ngram import POLICIES

RUNTIMES = ("auto", "executorch", "eager")
TARGET_RUNTIMES = RUNTIMES + ("llamacpp",)  # a target may also verify on its GGUF with llama.cpp


def _check(ok: bool, where: str, name: str, want: str, got) -> None:
    if not ok:
        raise OmniDraftError(f"{where}.{name} must be {want}, got {got!r}")


@dataclass(frozen=True)
class TargetRef:
    """Where the target is. ``ref``: a catalog name, a model directory, a .gguf file, the
    http(s):// URL of `omnidraft serve-target`, or openai+http(s)://HOST:PORT/v1 of an
    OpenAI-compatible server. A server needs the bearer ``token`` and, unless it reports a catalog
    name, the served model's ``tokenizer`` (a catalog name or model directory). An OpenAI-API
    server: ``model`` (the served model's name, when it serves several), ``context`` (its context
    length in tokens) and ``engine`` (its wire, when its /models does not say). ``fallback``: a
    local model to continue on when the server is unreachable."""

    ref: str
    token: str | None = field(default=None, repr=False)  # never printed
    tokenizer: str | None = None
    model: str | None = None
    context: int = 2048
    engine: str | None = None
    fallback: str | None = None

    def __post_init__(self):
        _check(isinstance(self.ref, str) and bool(self.ref.strip()), "TargetRef", "ref",
               "a model name, path or URL", self.ref)
        _check(self.context >= 16, "TargetRef", "context", ">= 16", self.context)
        if not self.remote:
            for name in ("token", "model", "engine", "fallback"):
                if getattr(self, name) is not None:
                    raise OmniDraftError(f"TargetRef.{name} is for a server target, and {self.ref!r} is local",
                                         f"drop {name}, or give the server's http(s):// URL")

    @property
    def remote(self) -> bool:
        return self.ref.startswith(REMOTE_SCHEMES)

# saved conversation states (pairs/conversations.py): RAM for the conversation visited last, the rest
# restored from their files (the page cache) as fast: 8 conversations of the 0.5B pair visited in turn
# came back in 0.094 s with 64 MiB or 256 MiB, 0.097 s a follow-up at once (docs/serving.md)
DEFAULT_CACHE_RAM_MIB = 64
DEFAULT_STATE_DISK_MIB = 2048


@dataclass(frozen=True)
class Runtime:
    """How the parts run here. ``drafter`` / ``target``: ``executorch`` runs the program `omnidraft
    export` (or `omnidraft pair`) wrote, ``eager`` PyTorch, ``auto`` the program when one is built
    and loads, else PyTorch; a target may also be ``llamacpp``: its GGUF on llama.cpp (the
    ``llamacpp`` extra). ``quant``, ``max_seq``, ``specvocab_k``: which drafter program.
    ``dtype``: an eager target's weights. ``threads``: torch's and ExecuTorch's (None: as set).
    ``ngram_policy`` / ``ngram_mib``: the pair's n-gram cache eviction and memory bound.
    ``memory_mib``: the bound of the pair's memory of earlier answers (memory/), disk and RAM.
    ``max_memory_mib``: the most the process may hold resident (models/budget.py; None: no budget):
    the other target runtime and more slots' caches load only within it, and a pair that does not
    fit is an error. ``cache_ram_mib``: saved conversation states kept in RAM (pairs/conversations.py;
    None: DEFAULT_CACHE_RAM_MIB where a model in use can save its state; 0: none saved), written
    through to ``state_dir`` (None: under $OMNIDRAFT_HOME) within ``state_disk_mib``."""

    drafter: str = "auto"
    target: str = "auto"
    quant: str = "8da8w"
    max_seq: int = 1024
    specvocab_k: int = 0
    dtype: str = "bf16"
    threads: int | None = None
    ngram_policy: str = "lfu"
    ngram_mib: int = 64
    memory_mib: int = DEFAULT_MIB
    max_memory_mib: int | None = None
    cache_ram_mib: int | None = None
    state_dir: str | None = None
    state_disk_mib: int = DEFAULT_STATE_DISK_MIB

    def __post_init__(self):
        for name, value, choices in (("drafter", self.drafter, RUNTIMES), ("target", self.target, TARGET_RUNTIMES),
                                     ("quant", self.quant, QUANTS), ("dtype", self.dtype, DTYPES),
                                     ("ngram_policy", self.ngram_policy, POLICIES)):
            _check(value in choices, "Runtime", name, f"one of {', '.join(choices)}", value)
        _check(self.max_seq >= 16, "Runtime", "max_seq", ">= 16", self.max_seq)
        _check(self.specvocab_k >= 0, "Runtime", "specvocab_k", ">= 0", self.specvocab_k)
        _check(self.threads is None or self.threads >= 1, "Runtime", "threads", ">= 1", self.threads)
        _check(self.ngram_mib >= 1, "Runtime", "ngram_mib", ">= 1", self.ngram_mib)
        _check(self.memory_mib >= 1, "Runtime", "memory_mib", ">= 1", self.memory_mib)
        _check(self.max_memory_mib is None or self.max_memory_mib >= 1, "Runtime", "max_memory_mib", ">= 1",
               self.max_memory_mib)
        _check(self.cache_ram_mib is None or self.cache_ram_mib >= 0, "Runtime", "cache_ram_mib",
               ">= 0 (0: no states saved)", self.cache_ram_mib)
        _check(self.state_disk_mib >= 0, "Runtime", "state_disk_mib", ">= 0 (0: none on disk)", self.state_disk_mib)

    @property
    def budget(self) -> Budget:
        return Budget(None if self.max_memory_mib is None else self.max_memory_mib << 20)
