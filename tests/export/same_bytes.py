"""The byte-identity tests' programs: a tiny qwen2 drafter or target (two methods each) exported once per
test run with every shortcut of the lowering (what `omnidraft export` ships), for test_lower.py to
export the same model again without the shortcuts.

The model has one layer and a 1,024-token vocabulary: a program's bytes depend on the ops the
shortcuts touch, not on depth or vocabulary size, and an export of it takes ~20 s instead of
~35 s (two layers, Qwen2.5's 151,936 tokens)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from ..conftest import tiny


@dataclass
class Shipped:
    pte: bytes  # program.pte
    passes: int  # XNNPACK passes run while lowering
    children: list[bool]  # for each method lowered in a forked child: whether it came back


def model():
    return tiny("qwen2", 1024, seed=7, num_hidden_layers=1)


def export(role: str, out: Path) -> bytes:
    """Export ``role`` (drafter or target, two methods each) to ``out``; program.pte's bytes."""
    import omnidraft.export.lower as lower

    cfg = lower.ExportConfig(drafter="tiny", quant="8da8w", max_seq=128, lora_rank=4, head_width=16,
                             role=role, decode_window=64)
    run = lower.export_drafter if role == "drafter" else lower.export_target
    run(copy.deepcopy(model()), out, cfg, log=lambda s: None)
    return (out / "program.pte").read_bytes()


def ship(role: str, out: Path) -> Shipped:
    """The shipped export, counting the XNNPACK passes it ran and what two_methods' child returned."""
    from executorch.backends.xnnpack._passes import XNNPACKPassManager

    import omnidraft.export.two_methods as two_methods

    passes, children = [], []
    transform, load = XNNPACKPassManager.transform, two_methods._load

    def counted(self):
        passes.extend(self.passes)
        return transform(self)

    def loaded(path, mine):
        children.append(load(path, mine))
        return children[-1]

    with mock.patch.object(XNNPACKPassManager, "transform", counted), mock.patch.object(two_methods, "_load", loaded):
        pte = export(role, out)
    return Shipped(pte, len(passes), [c is not None for c in children])

