"""A loaded program's conversation state: the ids its cache holds and those positions of every
layer's keys and values, copied out of the program and written back into it later, so that a
conversation comes back without reading its history again (docs/programs.md, "Conversation state").

The caches are the program's mutable buffers (export/program.py StaticKV: ``kv.k_<i>``,
``kv.v_<i>``), emitted with their names (export/lower.py) so that ExecuTorch's
``get_attribute`` returns each as a tensor over the program's own memory: a save copies the first
``n`` positions out, a restore copies them in. Both methods of a target read one set of caches,
so a restore through ``forward``'s serves ``decode`` too. Positions past ``n`` keep whatever they
held: a program attends only to positions before the one it writes.

A KVState also carries llama.cpp's state (device/llamacpp.py): there the cache is opaque, so
``keys`` is one uint8 blob of the sequence's state as llama.cpp serialises it and ``values`` is
empty; the functions below are for ExecuTorch programs only.

Knows the caches' names and layouts and ExecuTorch's method API; nothing about conversations,
where states are kept, or files.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from omnidraft.errors import OmniDraftError

NAMES = ("kv.k_{}", "kv.v_{}")


@dataclass(frozen=True)
class KVState:
    """``ids`` and, per layer, the keys' and values' first ``len(ids)`` positions (in the
    program's layout: [Hkv, D, n] / [Hkv, n, D] head-major, [1, n, Hkv, D] otherwise), or for
    llama.cpp one [size] uint8 blob in ``keys`` and no ``values``; ``weights`` names what computed
    them (the program and its .ptd, or the GGUF: a state is only ever restored there)."""

    weights: str
    ids: tuple[int, ...]
    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


def named(method) -> bool:
    """``method``'s program was exported with its caches' names (else nothing here works on it)."""
    try:
        method._method.get_attribute(NAMES[0].format(0))
        return True
    except (RuntimeError, ValueError, IndexError):
        return False


def caches(method, max_seq: int) -> list[tuple[torch.Tensor, torch.Tensor, int, int]]:
    """(keys, values, the keys' sequence axis, the values') of each layer: tensors over the loaded
    ``method``'s memory (valid while it is loaded; fetch them again after any load)."""
    out, i = [], 0
    while True:
        try:
            k, v = (method._method.get_attribute(name.format(i)) for name in NAMES)
        except (RuntimeError, ValueError, IndexError) as err:  # past the last layer, or names not emitted
            if i == 0:
                raise OmniDraftError("this program's caches are not named: its conversations cannot be saved",
                                     "re-export it with this version (`omnidraft export`)") from err
            return out
        out.append((k, v, _axis(k, max_seq), _axis(v, max_seq)))
        i += 1


def save(method, max_seq: int, ids: list[int], weights: str) -> KVState:
    """The state of the ``len(ids)`` positions ``method``'s caches hold, copied out."""
    n = len(ids)
    held = caches(method, max_seq)
    return KVState(weights, tuple(ids), tuple(k.narrow(a, 0, n).clone() for k, _, a, _ in held),
                   tuple(v.narrow(b, 0, n).clone() for _, v, _, b in held))


def restore(method, max_seq: int, state: KVState, weights: str) -> None:
    """Write ``state`` into ``method``'s caches (``weights`` must be the ones that computed it)."""
    if state.weights != weights:
        raise OmniDraftError("a saved conversation state is from another program or adapter",
                             f"it was computed by {state.weights}, not {weights}")
    held = caches(method, max_seq)
    if len(held) != len(state.keys):
        raise OmniDraftError(f"a saved conversation state has {len(state.keys)} layers, the program {len(held)}")
    n = len(state.ids)
    with torch.no_grad():
        for (k, v, a, b), sk, sv in zip(held, state.keys, state.values):
            k.narrow(a, 0, n).copy_(sk)
            v.narrow(b, 0, n).copy_(sv)


def _axis(t: torch.Tensor, max_seq: int) -> int:
    """The sequence axis of a cache: the one max_seq long."""
    axes = [i for i, size in enumerate(t.shape) if size == max_seq]
    if len(axes) != 1:
        raise OmniDraftError(f"a cache of shape {tuple(t.shape)} has no single axis of {max_seq} positions")
    return axes[0]
