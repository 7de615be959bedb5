"""Provenance records are shared, not deep-copied, while exporting (export/provenance.py): a deep
copy inside the block is the record itself, outside it a copy again (the program's bytes with and
without it: test_lower.py)."""

import copy

import torch
from torch.fx.traceback import NodeSource

from omnidraft.export.provenance import shared_provenance



def test_a_record_is_shared_inside_the_block_and_copied_outside():
    graph = torch.fx.Graph()
    record = NodeSource(graph.placeholder("x"), "a pass")
    with shared_provenance():
        assert copy.deepcopy([record])[0] is record
    copied = copy.deepcopy([record])[0]
    assert copied is not record and copied.pass_name == "a pass"
