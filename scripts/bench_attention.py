"""What batch-invariant attention costs (#23): 24 attention calls of Qwen2.5-Coder-0.5B's shape
(14 query heads, 2 KV heads, head dim 64, a 1024-slot static cache) lowered to XNNPACK, timed
through the ExecuTorch runtime at 1 and 4 query tokens, for

- ``custom_sdpa``: ExecuTorch's LLM attention op (drafter programs; not batch-invariant);
- ``masked (whole cache)``: export/program.py ``_masked_sdpa``, what target programs ship;
- ``masked (first L slots)``: a prototype attending to the first L = round_up(pos + T, 64) slots
  only, L given by the shape of an additive mask input (a backed dynamic size, so XNNPACK keeps
  the products; the slicing runs outside it).

  python scripts/bench_attention.py --lengths 128,256,1024
Writes bench/results/attention-<stamp>.{json,md}.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

S, HKV, GROUP, D, LAYERS = 1024, 2, 7, 64, 24


def _first_slots(q, kc, vc, mask, scaling):
    """q [1, T, Hq, D]; kc, vc [1, S, Hkv, D]; mask [T, L] additive -> [1, T, Hq, D]."""
    import torch

    T, L = mask.shape
    qg = q.reshape(T, HKV, GROUP, D).permute(1, 0, 2, 3).reshape(HKV, T * GROUP, D)
    k = kc[0, :L].permute(1, 2, 0)  # [Hkv, D, L]
    v = vc[0, :L].permute(1, 0, 2)  # [Hkv, L, D]
    scores = torch.bmm(qg, k).reshape(HKV, T, GROUP, L) * scaling + mask.unsqueeze(1)
    probs = torch.softmax(scores, dim=-1).reshape(HKV, T * GROUP, L)
    return torch.bmm(probs, v).reshape(HKV, T, GROUP, D).permute(1, 0, 2, 3).reshape(1, T, HKV * GROUP, D)


def _programs():
    """kind -> (module, example inputs, dynamic shapes)."""
    import torch
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - registers llama::*

    from omnidraft.export.program import _causal_mask, _masked_sdpa

    class Cache(torch.nn.Module):  # q, kc, vc, pos [1]
        def __init__(self, masked: bool):
            super().__init__()
            self.masked = masked

        def forward(self, q, kc, vc, pos):
            start = pos[0].item()
            torch._check_is_size(start)
            torch._check(start + q.shape[1] <= S)
            positions = torch.arange(q.shape[1]) + pos[0]
            if self.masked:
                mask = _causal_mask(positions, S)
                return torch.stack([_masked_sdpa(q, kc, vc, mask, 0.125) for _ in range(LAYERS)])
            return torch.stack([torch.ops.llama.custom_sdpa(q, kc, vc, start, None, 0.0, True, 0.125)
                                for _ in range(LAYERS)])

    class Slots(torch.nn.Module):  # q, kc, vc, mask [T, L]
        def forward(self, q, kc, vc, mask):
            return torch.stack([_first_slots(q, kc, vc, mask, 0.125) for _ in range(LAYERS)])

    T = torch.export.Dim("T", min=1, max=64)
    q, kc = torch.randn(1, 4, HKV * GROUP, D), torch.randn(1, S, HKV, D)
    by_pos = ((q, kc, kc.clone(), torch.tensor([64])), ({1: T}, None, None, None))
    return {"custom_sdpa": (Cache(False), *by_pos), "masked (whole cache)": (Cache(True), *by_pos),
            "masked (first L slots)": (Slots(), (q, kc, kc.clone(), torch.zeros(4, 128)),
                                       ({1: T}, None, None, {0: T, 1: torch.export.Dim("L", min=1, max=S)}))}


def main() -> int:
    from omnidraft.device.threads import configure_process

    configure_process()
    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, target=None, k=False)
    ap.add_argument("--lengths", default="128,256,1024", help="filled cache positions + the call's tokens")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    benchsetup.start(args.threads)
    log = benchsetup.logger("attention")
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    from omnidraft.device.threads import ensure_pool, program_call
    from omnidraft.pairs.cost import cpu_info

    ensure_pool()
    lengths = [int(x) for x in args.lengths.split(",")]
    kc, vc = torch.randn(1, S, HKV, D), torch.randn(1, S, HKV, D)
    ms: dict[str, dict[str, float]] = {}
    for kind, (module, example, dims) in _programs().items():
        ep = torch.export.export(module, example, dynamic_shapes=dims, strict=True)
        method = Runtime.get().load_program(
            to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
        ).load_method("forward")
        for n in lengths:
            for t in (1, 4):
                q = torch.randn(1, t, HKV * GROUP, D)
                start = n - t
                if kind.startswith("masked (first"):
                    slots = -(-n // 64) * 64
                    last = torch.where(torch.arange(slots)[None] <= (torch.arange(t) + start)[:, None], 0.0,
                                       float("-inf"))
                    inputs = [q, kc, vc, last]
                else:
                    inputs = [q, kc, vc, torch.tensor([start])]
                times = []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    with program_call():
                        method.execute(inputs)
                    times.append((time.perf_counter() - t0) * 1e3)
                ms.setdefault(kind, {})[f"{n}/{t}"] = round(statistics.median(times), 2)
        log(f"{kind}: {ms[kind]}")
    cpu = cpu_info()
    report = benchio.stamp_report(cpu=cpu, layers=LAYERS, cache_slots=S, ms=ms)
    cols = [f"{n}/{t}" for n in lengths for t in (1, 4)]
    md = [f"CPU: {cpu['model']} ({' '.join(cpu['flags'])}); {args.threads} threads. Median ms of {LAYERS} "
          f"attention calls (14 query heads, 2 KV heads, head dim 64, {S}-slot cache) at "
          "(positions filled after the call) / (query tokens).", ""]
    md += benchio.table(["attention", *cols], [[k, *[v[c] for c in cols]] for k, v in ms.items()])
    benchio.save(args.out, "attention", "What batch-invariant attention costs", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
