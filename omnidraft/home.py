"""Where OmniDraft keeps its files: $OMNIDRAFT_HOME, default ~/.cache/omnidraft.

Knows the folder layout only; what goes into each folder belongs to the modules that write it.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

SHARED = ("models", "programs", "vocab", "gguf", "packages")  # what a scratch home links from this one


def home() -> Path:
    """The root folder for fetched models, pair state and logs (created on first use)."""
    root = os.environ.get("OMNIDRAFT_HOME") or str(Path.home() / ".cache" / "omnidraft")
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def subdir(*parts: str) -> Path:
    path = home().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def scratch_home(path: Path) -> Path:
    """A fresh home at ``path`` whose model, program and vocabulary folders are links to this
    home's: what a run that must not touch this home's pair state, adapters and logs reads."""
    real = home()
    path.mkdir(parents=True, exist_ok=False)
    for name in SHARED:
        if (real / name).is_dir():
            (path / name).symlink_to(real / name)
    return path


def safe_name(s: str) -> str:
    """A file-safe name for a model reference: a catalog name as it is, a path or URL by its
    last part plus a short hash of the whole."""
    if re.fullmatch(r"[A-Za-z0-9._-]+", s):
        return s
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", s.rstrip("/").rsplit("/", 1)[-1])[:40] or "model"
    return f"{tail}.{hashlib.sha256(s.encode()).hexdigest()[:8]}"
