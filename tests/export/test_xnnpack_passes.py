"""XNNPACK passes that cannot change a partition are skipped (export/xnnpack_passes.py): the rule
keeps a pass whenever one of the ops it rewrites is present, the table still describes ExecuTorch's
pass list and patterns (the program's bytes with the skips and with every pass: test_lower.py)."""

import pytest
import torch


pytest.importorskip("executorch")

from executorch.backends.xnnpack._passes import XNNPACKPassManager  # noqa: E402

from omnidraft.export.xnnpack_passes import NEEDS, can_change, op_names  # noqa: E402

LINEAR_OPS = frozenset({"aten.mm.default", "aten.add.Tensor", "aten.view_copy.default"})


def test_a_pass_runs_when_an_op_it_rewrites_is_present():
    assert not can_change("FuseBatchNormPass", LINEAR_OPS)
    assert can_change("FuseBatchNormPass", LINEAR_OPS | {"aten._native_batch_norm_legit_no_training.default"})
    # DecomposeBatchNorm turns a batch norm into a convolution that the 1-D pass must see
    assert can_change("Conv1dUnsqueezePass", LINEAR_OPS | {"aten.native_batch_norm.default"})
    assert can_change("ConstPropPass", frozenset())  # a pass not in the table always runs
    assert set(NEEDS) <= {p.__name__ for p in XNNPACKPassManager(None).passes}  # names still current


def test_a_pattern_pass_runs_only_where_one_of_its_patterns_could_match():
    from executorch.backends.xnnpack.partition.graphs import sdpa

    for pattern in sdpa.get_graphs():
        assert can_change("ConvertToSDPAPass", LINEAR_OPS | op_names(pattern.graph))
    every = frozenset.union(*(op_names(p.graph) for p in sdpa.get_graphs()))
    assert not can_change("ConvertToSDPAPass", LINEAR_OPS | (every - {"aten._softmax.default"}))


def test_only_a_wide_concatenation_is_decomposed():
    from executorch.exir.dialects._ops import ops as exir_ops

    def cat_of(n: int) -> torch.fx.Graph:
        graph = torch.fx.Graph()
        xs = [graph.placeholder(f"x{i}") for i in range(n)]
        graph.output(graph.call_function(exir_ops.edge.aten.cat.default, (xs, 1)))
        return graph

    assert not can_change("DecomposeConcatenate", op_names(cat_of(2)))
    assert can_change("DecomposeConcatenate", op_names(cat_of(6)))
