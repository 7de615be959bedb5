"""Atomic file writes: the data goes to a temp file beside the destination, which then replaces
it in one ``os.replace``, so a reader (or a crash) sees the old file or the new one, never half.

Knows paths and files; nothing about what is in them or which folder they belong in (home.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(path: Path, suffix: str = "") -> Iterator[Path]:
    """A temp path beside ``path`` (ending with ``suffix``), the writer's own (process and
    thread), for the block to write; moved onto ``path`` when the block ends, left in place if it
    raises. Writers racing on one path each land whole; the last one's bytes stay."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp{suffix}")
    yield tmp
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj, **dumps) -> None:
    """Write ``json.dumps(obj, **dumps)`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, **dumps))


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path``.lock for the block (other processes' and threads' blocks
    on the same path wait): for a read-modify-write of ``path``."""
    with open(f"{path}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
