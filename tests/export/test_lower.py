"""The lowering's shortcuts (export/lower.py: shared provenance records, shape-only quantisation
ops, only the XNNPACK passes that can change a partition, a target's two methods lowered side by
side and a method's partitions preprocessed on two cores) leave the program's bytes unchanged: the
shipped export of a tiny two-method target (same_bytes.py) against the same model exported with
none of them. One export without every shortcut instead of one per shortcut: each shortcut's own
rules are tested in its module's tests; the drafter's program is compared the same way by the
export suite's test (tests/bench/test_export_time.py: settings none and shipped, each in a child
process). The second (one-token) method is still lowered in a child, whose program this process
then cannot fill with weights: the method is lowered here instead, which also shows that a
child's method has the bytes of one lowered in this process."""

import contextlib
import types

import pytest
import torch

pytest.importorskip("executorch")

from executorch.backends.xnnpack._passes import XNNPACKPassManager  # noqa: E402

import omnidraft.export.lower as lower  # noqa: E402
import omnidraft.export.two_methods as two_methods  # noqa: E402

from ..conftest import vocab_len  # noqa: E402
from .same_bytes import export  # noqa: E402


def test_the_program_is_byte_identical_with_and_without_every_shortcut(shipped, qwen_tok, tmp_path, monkeypatch):
    program = shipped  # first: the shortcuts are replaced below
    assert program.children == [True]  # the shipped export lowered "decode" in a child
    ran = []
    full = XNNPACKPassManager.transform
    monkeypatch.setattr(XNNPACKPassManager, "transform", lambda self: ran.extend(self.passes) or full(self))
    for shortcut in ("shared_provenance", "shape_only_quant_ops", "applicable_passes"):
        monkeypatch.setattr(lower, shortcut, contextlib.nullcontext)
    monkeypatch.setattr(two_methods, "preprocess_on_two_cores", contextlib.nullcontext)
    nothing = types.SimpleNamespace(graph_module=torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph()))
    real, loaded = two_methods._load, []
    monkeypatch.setattr(two_methods, "_load", lambda path, mine: loaded.append(real(path, nothing)) or loaded[-1])
    export(vocab_len(qwen_tok), tmp_path)
    assert loaded == [None]  # the child's weights could not be filled
    assert len(ran) > program.passes  # the shipped export skipped passes ...
    assert (tmp_path / "program.pte").read_bytes() == program.pte  # ... and no shortcut changed the program
