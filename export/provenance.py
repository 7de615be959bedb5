"""Share FX nodes' provenance records between passes instead of deep-copying them.

Every node a graph pass creates records where it came from (``node.meta["from_node"]``, a list of
``torch.fx.traceback.NodeSource``), and torch builds each new record by deep-copying the source
node's whole history. Over torch.export and ExecuTorch's lowering passes the histories grow with
every pass, and copying them is ~9% of an 8da8w target's export. The records are never changed
once built (torch and ExecuTorch only build new lists from them), so within ``shared_provenance()``
a deep copy of a record is the record itself: the same histories, without the copying. The
program does not change (the test compares the bytes of programs exported with and without it).

Knows torch.fx's provenance records; nothing about models.
"""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def shared_provenance() -> Iterator[None]:
    """Within the block, deep-copying a NodeSource returns it (histories are shared, not copied)."""
    from torch.fx.traceback import NodeSource

    had = "__deepcopy__" in NodeSource.__dict__
    previous = NodeSource.__dict__.get("__deepcopy__")
    NodeSource.__deepcopy__ = lambda self, memo: self
    try:
        yield
    finally:
        if had:
            NodeSource.__deepcopy__ = previous
        else:
            del NodeSource.__deepcopy__
