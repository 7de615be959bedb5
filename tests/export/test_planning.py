"""export/planning.py: a program's caches, written in place, are planned once (not again as the
buffer mutations its output node returns), and the program computes what eager PyTorch does."""

import pytest
import torch
from torch import nn

pytest.importorskip("executorch")

CACHE = 2 * 64 * 256 * 4  # bytes of one layer's cache below


class _Cached(nn.Module):
    """Three layers, each writing its input into its cache at ``pos`` in place, then reading it all."""

    def __init__(self):
        super().__init__()
        for i in range(3):
            self.register_buffer(f"k_{i}", torch.zeros(2, 64, 256), persistent=False)

    def forward(self, x, pos):  # x [1, 128], pos [1]
        h = x
        for i in range(3):
            kc = getattr(self, f"k_{i}")
            kc[:, :, pos] = h.reshape(2, 64, 1)
            h = h + kc.sum(-1).reshape(1, 128)
        return h


@pytest.mark.parametrize("methods", [("a",), ("a", "b")])
def test_caches_are_planned_once_and_the_program_computes_what_eager_does(methods):
    from executorch.exir import ExecutorchBackendConfig, to_edge
    from executorch.runtime import Runtime

    from omnidraft.export.planning import planner

    args = (torch.randn(1, 128), torch.tensor([3]))
    edge = to_edge({m: torch.export.export(_Cached(), args, strict=True) for m in methods})
    et = edge.to_executorch(ExecutorchBackendConfig(
        run_reinplace_pass=True, memory_planning_pass=planner(share_mutable_buffers=len(methods) > 1)))
    for plan in et.executorch_program.execution_plan:
        sizes = plan.non_const_buffer_sizes  # [0, activations, (shared caches)]
        assert sum(sizes) < 4 * CACHE, sizes  # the three caches once, not twice
        if len(methods) > 1:
            assert sizes[1] < CACHE and sizes[2] == 3 * CACHE, sizes

    program = Runtime.get().load_program(et.buffer)
    loaded = [program.load_method(m) for m in methods]
    eager = _Cached()
    gen = torch.Generator().manual_seed(0)
    for step, pos in enumerate([3, 5, 3, 7]):  # the methods take turns on one set of caches
        x = torch.randn(1, 128, generator=gen)
        got = loaded[step % len(loaded)].execute([x, torch.tensor([pos])])[0]
        assert torch.allclose(got, eager(x, torch.tensor([pos])), atol=1e-4)
