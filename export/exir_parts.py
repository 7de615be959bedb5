"""Parts of ``executorch.exir`` (its serialisers, the decorators the runtime's bindings import)
without the package's ``__init__``, which imports the whole exporter: torch._dynamo, inductor,
the edge dialect and torchao, ~5 s and ~0.12 GB resident in a process that only runs programs
(the server, a Session, the daemon).

Inside ``exir_parts()`` the package is a placeholder, so an import reads only the submodules it
names (and theirs); the placeholder is taken out again after, and a later ``import
executorch.exir`` runs the real package, which finds those submodules already loaded (the same
module objects). Where the exporter is already imported, nothing is bypassed.

Knows ExecuTorch's package layout; nothing about programs or models.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from pathlib import Path
from typing import Iterator

_lock = threading.RLock()


@contextlib.contextmanager
def exir_parts() -> Iterator[None]:
    """Imports inside read ``executorch.exir``'s submodules without its package ``__init__``."""
    with _lock:
        if "executorch.exir" in sys.modules:  # the real package (or an enclosing placeholder)
            yield
            return
        import executorch

        placeholder = types.ModuleType("executorch.exir")
        placeholder.__path__ = [str(Path(executorch.__path__[0]) / "exir")]
        sys.modules["executorch.exir"], executorch.exir = placeholder, placeholder
        try:
            yield
        finally:
            if sys.modules.get("executorch.exir") is placeholder:
                del sys.modules["executorch.exir"]
            if getattr(executorch, "exir", None) is placeholder:
                del executorch.exir
