"""ExecuTorch's runtime without its exporter: the pybindings and the kernel libraries of the
LLM custom ops and the quantised ops, and nothing a program's run does not need.

The bindings import ``executorch.exir._warnings``, and so the whole exporter; here they are
imported inside ``exir_parts()`` (export/exir_parts.py). The custom ops' kernels are loaded from
their library, as ``executorch.extension.llm.custom_ops.custom_ops`` loads them, without that
module's tracing rules (inductor lowerings), which only the export reads.

Knows ExecuTorch's package layout; nothing about programs or models.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from omnidraft.export.exir_parts import exir_parts

_lock = threading.Lock()


def portable_lib():
    """``executorch.extension.pybindings.portable_lib``, imported without the exporter."""
    with exir_parts():
        from executorch.extension.pybindings import portable_lib as lib
    return lib


def runtime():
    """``executorch.runtime.Runtime.get()`` with the kernels a quantised LLM program calls outside
    XNNPACK registered: the LLM custom ops (KV-cache update, attention) and the quantised ops."""
    portable_lib()
    from executorch.runtime import Runtime

    _kernels()
    return Runtime.get()


def _kernels() -> None:
    global _kernels_loaded
    with _lock:
        if _kernels_loaded:
            return
        import torch

        import executorch.kernels.quantized  # noqa: F401  (loads its library itself)
        try:
            torch.ops.llama.sdpa_with_kv_cache.default
        except (AttributeError, RuntimeError):  # not loaded yet
            folder = Path(sys.modules["executorch"].__path__[0]) / "extension" / "llm" / "custom_ops"
            torch.ops.load_library(next(folder.glob("**/*custom_ops_aot_lib.*")))
        _kernels_loaded = True


_kernels_loaded = False
