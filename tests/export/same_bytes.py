"""The tiny programs the byte-identity tests export: a drafter and a target (two methods each), each
exported once per test run with every shortcut of the lowering (what `omnidraft export` ships), for
test_lower.py to export the same model again without the shortcuts. The target's 8da8w program is
also the one tests/device/test_target_program.py runs (one export serves both).

Each model has one layer: a program's bytes depend on the ops the shortcuts touch, not on depth. The
drafter has a 1,024-token vocabulary; the target has Qwen2.5's (the test that runs it needs its
tokenizer's ids)."""

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


def model(role: str, target_vocab: int):
    """The tiny drafter, or the tiny target with ``target_vocab`` ids (eos 7 and 9)."""
    if role == "drafter":
        return tiny("qwen2", 1024, seed=7, num_hidden_layers=1)
    base = tiny("qwen2", target_vocab, seed=2, num_hidden_layers=1)
    base.generation_config.eos_token_id = [7, 9]
    return base


def config(role: str, quant: str = "8da8w"):
    from omnidraft.export.lower import ExportConfig

    if role == "drafter":
        return ExportConfig(drafter="tiny", quant=quant, max_seq=128, lora_rank=4, head_width=16, decode_window=64)
    return ExportConfig(drafter="tiny-t", quant=quant, max_seq=128, head_width=16, role="target", decode_window=64)


def export(role: str, target_vocab: int, out: Path, quant: str = "8da8w"):
    """Export ``role``'s model to ``out``; its ProgramInfo."""
    import omnidraft.export.lower as lower

    run = lower.export_drafter if role == "drafter" else lower.export_target
    return run(copy.deepcopy(model(role, target_vocab)), out, config(role, quant), log=lambda s: None)


def ship(role: str, target_vocab: int, out: Path) -> Shipped:
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
        export(role, target_vocab, out)
    return Shipped((out / "program.pte").read_bytes(), len(passes), [c is not None for c in children])


def shipped(tmp_path_factory, role: str, target_vocab: int) -> tuple[Path, Shipped]:
    """(program folder, Shipped): ``role``'s 8da8w program, exported on first use once per test run."""
    folder, kept = once_per_run(tmp_path_factory, f"shipped-{role}",
                                lambda folder: ship(role, target_vocab, folder / "prog"))
    return folder / "prog", kept
