"""Propagate fake tensors through torchao's quantisation ops without re-running their maths.

torch.export and every graph pass of ExecuTorch's lowering re-propagate fake tensors through each
node. torchao's choose_qparams / quantize / dequantize ops are CompositeImplicitAutograd, so each
propagation runs their whole Python implementation on fake tensors (a dozen aten ops a call):
~30% of an 8da8w target's export. Within ``shape_only_quant_ops()`` a call that only propagates
(fake tensor arguments, no tracing mode recording what it runs) returns empty tensors of the
shape, dtype and layout the real implementation gave for the same arguments, learnt from the
first such call; any other call runs the real implementation. The program does not change (the
test compares the bytes of programs exported with and without it).

Knows torchao's three quantisation ops and torch's dispatch modes; nothing about models.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils import _pytree as pytree

OPS = ("choose_qparams_affine", "quantize_affine", "dequantize_affine")


@contextlib.contextmanager
def shape_only_quant_ops() -> Iterator[None]:
    """Within the block, propagating fake tensors through torchao's quantisation ops is a lookup."""
    import torchao.quantization.quant_primitives  # noqa: F401 - defines the ops
    from torch._inductor.decomposition import decompositions  # torchao registers its Python impls here

    lib = torch.library.Library("torchao", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            for name in OPS:
                lib.impl(name, _shape_only(decompositions[getattr(torch.ops.torchao, name).default]),
                         "CompositeImplicitAutograd")
        yield
    finally:
        lib._destroy()  # torchao's own kernels again


def _shape_only(real: Callable) -> Callable:
    """``real``, except that a propagating call with a signature seen before builds its outputs."""
    specs: dict[tuple, Any] = {}  # signature -> output spec, or None: not expressible, run real

    def call(*args, **kwargs):
        mode = _propagating_mode(args, kwargs)
        if mode is None:
            return real(*args, **kwargs)
        key = _signature(args, kwargs)
        if key not in specs:
            out = real(*args, **kwargs)
            specs[key] = _spec(out, [_expr(s) for s in _input_sizes(args, kwargs)])
            return out
        if specs[key] is None:
            return real(*args, **kwargs)
        return _build(specs[key], _input_sizes(args, kwargs), mode)

    return call


def _propagating_mode(args, kwargs) -> FakeTensorMode | None:
    """The fake mode of the arguments when the call only propagates shapes: every tensor is fake
    and no proxy, functionalisation or pre-dispatch mode would record the ops the call runs."""
    from torch._ops import _len_torch_dispatch_stack_pre_dispatch
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    if not tensors or not all(isinstance(t, FakeTensor) for t in tensors):
        return None
    modes = torch._C._TorchDispatchModeKey
    if (any(not isinstance(m, FakeTensorMode) for m in _get_current_dispatch_mode_stack())
            or torch._C._get_dispatch_mode(modes.PROXY) is not None
            or torch._C._get_dispatch_mode(modes.FUNCTIONAL) is not None
            or _len_torch_dispatch_stack_pre_dispatch() > 0):
        return None
    mode = tensors[0].fake_mode
    return mode if all(t.fake_mode is mode for t in tensors) else None


def _expr(x) -> Any:
    """An int, or the symbolic expression of a SymInt (read without adding a guard)."""
    return x.node.expr if isinstance(x, torch.SymInt) else x


def _input_sizes(args, kwargs) -> list:
    """Every size of every tensor argument, in order (what an output's sizes may equal)."""
    return [s for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) for s in t.shape]


def _signature(args, kwargs) -> tuple:
    def leaf(a):
        if isinstance(a, torch.Tensor):
            return ("tensor", a.dtype, a.device.type, tuple(map(_expr, a.shape)),
                    tuple(map(_expr, a.stride())), a.requires_grad)
        return (type(a).__name__, _expr(a) if isinstance(a, torch.SymInt) else a)

    leaves, spec = pytree.tree_flatten((args, kwargs))
    return tuple(map(leaf, leaves)), str(spec)


def _spec(out, dims: list):  # dims: the inputs' sizes as _expr
    """How to rebuild ``out`` from the inputs' sizes: per tensor its dtype, device, requires_grad
    and each size as a constant or as the index of an equal input size; None when a size is
    neither or a tensor is not contiguous."""
    leaves, tree = pytree.tree_flatten(out)
    built = []
    for t in leaves:
        if not isinstance(t, torch.Tensor):
            return None
        sizes = []
        for s in map(_expr, t.shape):
            if isinstance(s, int):
                sizes.append(("const", s))
            elif s in dims:
                sizes.append(("input", dims.index(s)))
            else:
                return None
        if tuple(map(_expr, t.stride())) != _contiguous(list(map(_expr, t.shape))):
            return None
        built.append((sizes, t.dtype, t.device, t.requires_grad))
    return tree, built


def _contiguous(shape: list) -> tuple:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step = step * s
    return tuple(reversed(strides))


def _build(spec, sizes_in: list, mode: FakeTensorMode):
    """Empty fake tensors laid out as ``spec`` says, sized from this call's input sizes."""
    tree, built = spec
    outs = []
    with mode:
        for sizes, dtype, device, grad in built:
            shape = [v if kind == "const" else sizes_in[v] for kind, v in sizes]
            outs.append(torch.empty(shape, dtype=dtype, device=device).requires_grad_(grad))
    return pytree.tree_unflatten(outs, tree)
