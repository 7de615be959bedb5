"""Weights read from a mapped file, let go once quantised.

A model loaded from safetensors is mapped, not read: its fp32 tensors alias one mapping of the
file, and any tensor still viewing it (a norm's weight, a bias) keeps the whole mapping, and every
page quantisation read through it, resident. On the 1.5B target that was its 7.1 GB file beside its
2.2 GB of quantised weights through the rest of the export (9.4 GB where 2.4 would do), and every
child the lowering forks counted it again. ``own_memory`` copies the tensors quantisation left
plain into memory of their own, so the mapping goes when the originals do. While quantising,
``in_turn`` quantises one layer at a time and hands back the file's pages of each layer's fp32
weights once they are replaced (madvise DONTNEED, only on whole pages inside a mapped safetensors
file, which the allocator never reuses: a page dropped there is read from the file again if asked).

Knows torch modules' parameters and buffers; nothing about quantisation schemes.
"""

from __future__ import annotations

from typing import Callable

import torch

from omnidraft.mapped_files import drop, mappings

Filter = Callable[[torch.nn.Module, str], bool]


def in_turn(lm: torch.nn.Module, quantize: Callable[[Filter], None], chosen: Filter) -> None:
    """``quantize(filter)`` (torchao's quantize_ with a config) run on the modules ``chosen``
    selects, one stack layer at a time, then the rest; after each, the file pages of the weights it
    replaced are dropped (``drop_file_pages``)."""
    layers = [f"{name}.{i}" for name, m in lm.named_modules() if isinstance(m, torch.nn.ModuleList)
              for i in range(len(m))]
    inside = lambda fqn, prefix: fqn == prefix or fqn.startswith(prefix + ".")  # noqa: E731
    groups = [lambda fqn, p=p: inside(fqn, p) for p in layers]
    groups.append(lambda fqn: not any(inside(fqn, p) for p in layers))
    for group in groups:
        selected = lambda m, fqn, group=group: group(fqn) and chosen(m, fqn)  # noqa: E731
        old = [m.weight for fqn, m in lm.named_modules() if selected(m, fqn)]
        quantize(selected)
        drop_file_pages(old)


def drop_file_pages(tensors: list[torch.Tensor]) -> int:
    """Hand back the resident pages wholly inside each of ``tensors`` that lies in a mapped
    safetensors file (others are left alone); returns the bytes dropped."""
    maps = mappings(lambda path: path.endswith(".safetensors"))
    spans = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors]
    return drop([(a, b) for a, b in spans if any(lo <= a and b <= hi for lo, hi in maps)])


def own_memory(module: torch.nn.Module) -> int:
    """In place: every plain floating parameter and buffer under ``module`` (not a quantised tensor
    subclass) copied into storage of its own; returns how many."""
    n = 0
    with torch.no_grad():
        for m in module.modules():
            for t in [*m._parameters.values(), *m._buffers.values()]:
                if t is not None and type(t) in (torch.Tensor, torch.nn.Parameter) and t.is_floating_point():
                    t.data = t.data.clone()
                    n += 1
    return n
