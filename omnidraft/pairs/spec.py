"""Pairs: a drafter model bound to one target model, with its state on disk.

$OMNIDRAFT_HOME/pairs/<name>/pair.json names the two models; the per-target LoRA adapter and
acceptance head versions live in the adapter store ($OMNIDRAFT_HOME/adapters/<name>/vNNNN), the
training records in the verification log ($OMNIDRAFT_HOME/verlog.sqlite). Knows names, folders
and JSON; models are loaded by the callers.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from omnidraft.errors import OmniDraftError
from omnidraft.fsio import atomic_write_json
from omnidraft.home import safe_name, subdir

DEFAULT_DRAFTER = "smollm2-135m"


def pair_name(drafter: str, target: str) -> str:
    """A file-safe name for (drafter, target)."""
    return f"{safe_name(drafter)}--{safe_name(target)}"


REMOTE_SCHEMES = ("http://", "https://", "openai+http://", "openai+https://")


@dataclass
class PairSpec:
    drafter: str
    target: str  # catalog name, model dir, .gguf path, http(s):// or openai+http(s):// URL
    target_tokenizer: str | None = None  # for a remote target
    name: str = ""
    created: float = 0.0

    def __post_init__(self):
        if not self.name:
            self.name = pair_name(self.drafter, self.target)
        if not self.created:
            self.created = time.time()

    @property
    def remote(self) -> bool:
        return self.target.startswith(REMOTE_SCHEMES)


def pair_dir(name: str) -> Path:
    return subdir("pairs", name)


def save_spec(spec: PairSpec) -> None:
    atomic_write_json(pair_dir(spec.name) / "pair.json", asdict(spec), indent=1)


def load_spec(name: str) -> PairSpec:
    path = subdir("pairs") / name / "pair.json"
    if not path.is_file():
        raise OmniDraftError(f"no pair named {name!r}", "run `omnidraft pair --target ...` first")
    try:
        return PairSpec(**json.loads(path.read_text()))
    except (ValueError, TypeError) as err:
        raise OmniDraftError(f"pair file {path} is unreadable ({err})", "re-run `omnidraft pair`") from None


def list_specs() -> list[PairSpec]:
    root = subdir("pairs")
    out = []
    for p in sorted(root.iterdir()):
        if (p / "pair.json").is_file():
            try:
                out.append(load_spec(p.name))
            except OmniDraftError:
                continue
    return out


def adapter_store():
    from omnidraft.adapters import AdapterStore

    return AdapterStore(subdir("adapters"))


def log_path() -> Path:
    return subdir() / "verlog.sqlite"
