"""Where OmniDraft keeps its files: $OMNIDRAFT_HOME, default ~/.cache/omnidraft.

Knows the folder layout only; what goes into each folder belongs to the modules that write it.
"""

from __future__ import annotations

import os
from pathlib import Path


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
