"""Run on each XNNPACK partition only the delegate passes that can change it.

XNNPACK's preprocess runs its 17 graph passes on every partition it lowers, and each pass
re-propagates fake tensors through every node of the partition (with symbolic sizes, for the
dynamic token count): 36% of a drafter export's time, 0.8 s per pass per 4 SmolLM2 layers.
Eleven of those passes rewrite ops a decoder-only transformer lowered by export/lower.py rarely or
never puts in a partition: batch norm (two passes), convolution (the 1-D unsqueeze), PReLU, ReLU /
hardtanh fusion, max-pool's getitem, dim-order copies (two passes), concatenations of more than
five tensors, and the upsampling and attention subgraphs two passes match by pattern (the
drafter's attention is ExecuTorch's custom_sdpa, outside the delegate; the target's softmax
attention is not the pattern). Inside
``applicable_passes()`` such a pass is skipped on a partition that holds none of the ops it needs;
a partition that holds one gets every pass, so skipping never changes a program (the test
compares the bytes of programs lowered with and without it).

Knows XNNPACK's pass manager and the ops its skippable passes read; nothing about models.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch

# pass name -> what it rewrites, as alternative sets of edge ops (by name), read in ExecuTorch
# 1.5's sources: the pass can change a partition only if the partition holds every op of one set
# (or an earlier pass in XNNPACK's list can make them: DecomposeBatchNorm makes convolutions,
# DimOrderOpsRevertPass makes _to_copy); the two pattern-matching passes: each pattern's ops
_BATCH_NORM = [{"aten.native_batch_norm.default"}, {"aten._native_batch_norm_legit_no_training.default"}]
WIDE_CAT = "aten.cat.default/wide"
NEEDS: dict[str, list[set[str]] | Callable[[], list[set[str]]]] = {
    "ConvertToUpsampleBilinear2d": lambda: _pattern_ops("bilinear_2d"),
    "ConvertToSDPAPass": lambda: _pattern_ops("sdpa"),
    "DecomposeConcatenate": [{WIDE_CAT}],  # it splits only a cat of more than five tensors
    "FuseBatchNormPass": _BATCH_NORM,
    "DecomposeBatchNorm": _BATCH_NORM,
    "Conv1dUnsqueezePass": [{"aten.convolution.default"}, *_BATCH_NORM],
    "PReLUReshapePass": [{"aten._prelu_kernel.default"}],
    "FuseActivationPass": [{"aten.relu.default"}, {"aten.hardtanh.default"}],
    "RemoveGetItemPass": [{"aten.max_pool2d_with_indices.default"}, {"aten.max.dim"}],
    "DimOrderOpsRevertPass": [{"dim_order_ops._to_dim_order_copy.default"},
                              {"dim_order_ops._empty_dim_order.default"},
                              {"dim_order_ops._clone_dim_order.default"}],
    "RemoveRedundantCopyPass": [{"aten._to_copy.default"}, {"dim_order_ops._to_dim_order_copy.default"}],
}


def op_names(graph: torch.fx.Graph) -> frozenset[str]:
    """The names of the operators ``graph`` calls (edge ops as ``aten.x.overload``), and WIDE_CAT
    if it concatenates more than five tensors in one call."""
    calls = [n for n in graph.nodes if n.op == "call_function"]
    names = {getattr(n.target, "__name__", str(n.target)) for n in calls}
    wide = any(getattr(n.target, "__name__", "") == "aten.cat.default" and len(n.args[0]) > 5 for n in calls)
    return frozenset(names | ({WIDE_CAT} if wide else set()))


def can_change(pass_name: str, ops: frozenset[str]) -> bool:
    """False only for a pass known to rewrite nothing but ops absent from ``ops``."""
    needs = NEEDS.get(pass_name)
    if callable(needs):
        needs = needs()
    return needs is None or any(alternative <= ops for alternative in needs)


@contextlib.contextmanager
def applicable_passes() -> Iterator[None]:
    """Within the block, XNNPACK lowers each partition with the passes that can change it."""
    from executorch.backends.xnnpack._passes import XNNPACKPassManager

    full = XNNPACKPassManager.transform

    def transform(self):
        ops = op_names(self.exported_program.graph)
        self.passes = [p for p in self.passes if can_change(p.__name__, ops)]
        return full(self)

    XNNPACKPassManager.transform = transform
    try:
        yield
    finally:
        XNNPACKPassManager.transform = full


def _pattern_ops(graphs: str) -> list[set[str]]:
    """The ops of each subgraph a pattern-matching pass looks for: a pattern can match only where
    all its ops are (no earlier pass makes them)."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

    patterns = sdpa.get_graphs() if graphs == "sdpa" else list(bilinear_2d.get_graphs_dict())
    return [set(op_names(p.graph)) for p in patterns]
