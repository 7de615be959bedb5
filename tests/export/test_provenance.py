"""Provenance records are shared, not deep-copied, while exporting (export/provenance.py): a deep
copy inside the block is the record itself, outside it a copy again, and a program exported with
it has the same bytes as one exported without it."""

import contextlib
import copy

import torch
from torch.fx.traceback import NodeSource

from ..conftest import tiny, vocab_len

from omnidraft.export.provenance import shared_provenance


def test_a_record_is_shared_inside_the_block_and_copied_outside():
    graph = torch.fx.Graph()
    record = NodeSource(graph.placeholder("x"), "a pass")
    with shared_provenance():
        assert copy.deepcopy([record])[0] is record
    copied = copy.deepcopy([record])[0]
    assert copied is not record and copied.pass_name == "a pass"


def test_the_program_is_byte_identical_with_and_without_it(qwen_tok, tmp_path, monkeypatch):
    import omnidraft.export.lower as lower

    base = tiny("qwen2", vocab_len(qwen_tok), seed=5)
    cfg = lower.ExportConfig(drafter="tiny", quant="8da8w", max_seq=128, lora_rank=4, head_width=16,
                             role="target", decode_window=64)
    lower.export_target(copy.deepcopy(base), tmp_path / "shared", cfg, log=lambda s: None)
    monkeypatch.setattr(lower, "shared_provenance", contextlib.nullcontext)
    lower.export_target(copy.deepcopy(base), tmp_path / "copied", cfg, log=lambda s: None)
    assert (tmp_path / "shared" / "program.pte").read_bytes() == (tmp_path / "copied" / "program.pte").read_bytes()
