"""What batch-invariant attention costs (#23): the cache write and attention of 24 layers of
Qwen2.5-Coder-0.5B's shape (14 query heads, 2 KV heads, head dim 64, a 1024-slot static cache in
mutable buffers) lowered to XNNPACK, timed through the ExecuTorch runtime at 1 and 4 query tokens
after n filled positions, for

- ``custom_sdpa``: ExecuTorch's LLM ops (``update_cache`` + ``custom_sdpa``; drafter programs),
  not batch-invariant;
- ``masked, seq-major cache``: masked fixed-length products over caches in the custom ops' layout
  [1, S, Hkv, D], so each product first copies the cache into [Hkv, D, S] / [Hkv, S, D]
  (target programs of round 2, session 4);
- ``masked, head-major cache``: export/program.py ``_masked_sdpa`` over caches kept as
  [Hkv, D, S] and [Hkv, S, D] and written in place by index_put (what target programs ship).

The invariance column is the largest |difference| between the rows of a 4-token call and the
same positions computed one token per call (0.0: bit for bit).

  python scripts/bench_attention.py --lengths 128,256,512,1000
Writes bench/results/attention-<stamp>.{json,md}.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

S, HKV, GROUP, D, LAYERS = 1024, 2, 7, 64, 24
KINDS = ("custom_sdpa", "masked, seq-major cache", "masked, head-major cache")


def _seq_major_masked(q, kc, vc, mask):
    """Session 4's masked attention: q [1, T, Hq, D]; kc, vc [1, S, Hkv, D]; mask [T, 1, S]
    -> [1, T, Hq, D]."""
    import torch

    qg = q.reshape(-1, HKV, GROUP, D).permute(1, 0, 2, 3).reshape(HKV, -1, D)
    scores = torch.bmm(qg, kc[0].permute(1, 2, 0)) * 0.125  # the permutes copy the cache
    probs = torch.softmax(scores.reshape(HKV, -1, GROUP, S) + mask, dim=-1).reshape(HKV, -1, S)
    o = torch.bmm(probs, vc[0].permute(1, 0, 2))
    return o.reshape(HKV, -1, GROUP, D).permute(1, 0, 2, 3).reshape(1, -1, HKV * GROUP, D)


def _module(kind: str):
    """forward(q [1, T, Hq, D], k [1, T, Hkv, D], v [1, T, Hkv, D], pos [1]) -> [LAYERS, 1, T, Hq, D]:
    each layer writes k + i, v - i at pos..pos+T-1 into its own caches, then attends."""
    import torch
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - registers llama::*

    from omnidraft.export.program import _causal_mask, _masked_sdpa

    head_major = kind == KINDS[2]

    class Layers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for i in range(LAYERS):
                self.register_buffer(f"k{i}", torch.zeros((HKV, D, S) if head_major else (1, S, HKV, D)),
                                     persistent=False)
                self.register_buffer(f"v{i}", torch.zeros((HKV, S, D) if head_major else (1, S, HKV, D)),
                                     persistent=False)

        def forward(self, q, k, v, pos):
            start = pos[0].item()
            torch._check_is_size(start)
            torch._check(start + q.shape[1] <= S)
            positions = torch.arange(q.shape[1]) + pos[0]
            mask = _causal_mask(positions, S).unsqueeze(1)  # [T, 1, S]
            outs = []
            for i in range(LAYERS):
                kc, vc = getattr(self, f"k{i}"), getattr(self, f"v{i}")
                if head_major:
                    kc[:, :, positions] = (k + i)[0].permute(1, 2, 0)
                    vc[:, positions] = (v - i)[0].permute(1, 0, 2)
                    outs.append(_masked_sdpa(q, kc, vc, mask, 0.125))
                    continue
                torch.ops.llama.update_cache(k + i, kc, start)
                torch.ops.llama.update_cache(v - i, vc, start)
                outs.append(torch.ops.llama.custom_sdpa(q, kc, vc, start, None, 0.0, True, 0.125)
                            if kind == KINDS[0] else _seq_major_masked(q, kc, vc, mask))
            return torch.stack(outs)

    return Layers()


def _load(kind: str):
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
    from executorch.runtime import Runtime

    T = torch.export.Dim("T", min=1, max=64)
    example = (torch.randn(1, 4, HKV * GROUP, D), torch.randn(1, 4, HKV, D), torch.randn(1, 4, HKV, D),
               torch.tensor([64]))
    ep = torch.export.export(_module(kind), example, dynamic_shapes=({1: T}, {1: T}, {1: T}, None), strict=True)
    et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch(
        ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["b_k", "b_v"])], run_reinplace_pass=True))
    program = Runtime.get().load_program(et.buffer)
    return program, program.load_method("forward")  # the method needs its program alive


def main() -> int:
    from omnidraft.device.threads import configure_process

    configure_process()
    import benchio
    import benchsetup

    ap = benchsetup.parser(__doc__, target=None, k=False)
    ap.add_argument("--lengths", default="128,256,512,1000", help="filled cache positions after the call")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    benchsetup.start(args.threads)
    log = benchsetup.logger("attention")
    import torch

    from omnidraft.device.threads import ensure_pool, program_call
    from omnidraft.device.cpu import cpu_info

    ensure_pool()
    lengths = [int(x) for x in args.lengths.split(",")]
    gen = torch.Generator().manual_seed(0)
    q_all, k_all, v_all = (torch.randn(1, S, h, D, generator=gen) for h in (HKV * GROUP, HKV, HKV))
    methods = {kind: _load(kind) for kind in KINDS}

    def call(kind: str, start: int, n: int) -> torch.Tensor:  # positions start..start+n-1
        sl = slice(start, start + n)
        return methods[kind][1].execute([q_all[:, sl], k_all[:, sl], v_all[:, sl], torch.tensor([start])])[0]

    ms: dict[str, dict[str, float]] = {kind: {} for kind in KINDS}
    invariance = {}
    for kind in KINDS:  # fill once; every timed call rewrites the positions it attends to
        for start in range(0, max(lengths), 32):
            call(kind, start, min(32, S - start))
        wide = call(kind, 100, 4)  # [LAYERS, 1, 4, Hq, D]
        alone = torch.cat([call(kind, 100 + i, 1) for i in range(4)], dim=2)
        invariance[kind] = float((wide - alone).abs().max())
    for n in lengths:
        for t in (1, 4):
            times: dict[str, list[float]] = {kind: [] for kind in KINDS}
            for _ in range(args.reps):  # kinds interleaved per repetition
                for kind in KINDS:
                    t0 = time.perf_counter()
                    with program_call():
                        call(kind, n - t, t)
                    times[kind].append((time.perf_counter() - t0) * 1e3)
            for kind in KINDS:
                ms[kind][f"{n}/{t}"] = round(statistics.median(times[kind]), 2)
        log(f"{n} positions done")
    cpu = cpu_info()
    report = benchio.stamp_report(cpu=cpu, layers=LAYERS, cache_slots=S, ms=ms, invariance=invariance)
    cols = [f"{n}/{t}" for n in lengths for t in (1, 4)]
    md = [f"CPU: {cpu['model']} ({' '.join(cpu['flags'])}); {args.threads} threads. Median ms of one call "
          f"writing and attending {LAYERS} layers (14 query heads, 2 KV heads, head dim 64, {S}-slot cache) "
          "at (positions filled after the call) / (query tokens); kinds interleaved per repetition. "
          "Invariance: max |row of a 4-token call - that position computed alone|.", ""]
    md += benchio.table(["attention", *cols, "invariance"],
                        [[k, *[ms[k][c] for c in cols], f"{invariance[k]:.2g}"] for k in KINDS])
    benchio.save(args.out, "attention", "What batch-invariant attention costs", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
