"""The tiny program the byte-identity test exports: a target (two methods), exported once per test
run with every shortcut of the lowering (what `omnidraft export` ships), for test_lower.py to export
the same model again without the shortcuts. Its 8da8w program is also the one
tests/device/test_target_program.py runs (one export serves both).

One layer: a program's bytes depend on the ops the shortcuts touch, not on depth. Qwen2.5's
vocabulary (the test that runs it needs its tokenizer's ids)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from ..conftest import once_per_run, tiny


@dataclass
class Shipped:
    pte: bytes  # program.pte
    passes: int  # XNNPACK passes run while lowering
    children: list[bool]  # for each method lowered in a forked child: whether it came back


def model(target_vocab: int):
    """The tiny target with ``target_vocab`` ids (eos 7 and 9)."""
    base = tiny("qwen2", target_vocab, seed=2, num_hidden_layers=1)
    base.generation_config.eos_token_id = [7, 9]
    return base


def config(quant: str = "8da8w"):
    from omnidraft.export.lower import ExportConfig

    return ExportConfig(drafter="tiny-t", quant=quant, max_seq=128, head_width=16, role="target", decode_window=64)


def export(target_vocab: int, out: Path, quant: str = "8da8w"):
    """Export the model to ``out``; its ProgramInfo."""
    from omnidraft.export.lower import export_target

    return export_target(copy.deepcopy(model(target_vocab)), out, config(quant), log=lambda s: None)


def ship(target_vocab: int, out: Path) -> Shipped:
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
        export(target_vocab, out)
    return Shipped((out / "program.pte").read_bytes(), len(passes), [c is not None for c in children])


def shipped(tmp_path_factory, target_vocab: int) -> tuple[Path, Shipped]:
    """(program folder, Shipped): the 8da8w program, exported on first use once per test run."""
    folder, kept = once_per_run(tmp_path_factory, "shipped-target", lambda folder: ship(target_vocab, folder / "prog"))
    return folder / "prog", kept
