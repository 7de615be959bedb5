"""Provenance records are shared, not deep-copied, while exporting (export/provenance.py): a deep
copy inside the block is the record itself, outside it a copy again, and a program exported with
it has the same bytes as one exported without it."""

import copy

import torch
from torch.fx.traceback import NodeSource

from omnidraft.export.provenance import shared_provenance

from .same_bytes import without


def test_a_record_is_shared_inside_the_block_and_copied_outside():
    graph = torch.fx.Graph()
    record = NodeSource(graph.placeholder("x"), "a pass")
    with shared_provenance():
        assert copy.deepcopy([record])[0] is record
    copied = copy.deepcopy([record])[0]
    assert copied is not record and copied.pass_name == "a pass"


def test_the_program_is_byte_identical_with_and_without_it(shipped, tmp_path, monkeypatch):
    program = shipped("target")  # first: the shortcut is replaced below
    assert without("shared_provenance", "target", tmp_path, monkeypatch) == program.pte
