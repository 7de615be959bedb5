"""XNNPACK's runtime options, set before a program loads: its weight cache, which keeps one
packed copy of each weight for every method (and every program loaded with the same weights)
where each method's delegate would otherwise pack the whole model again at load (a target
program's ``forward`` and ``decode`` methods: two packed copies).

ExecuTorch 1.5's Python bindings do not expose backend options, so this calls the runtime's own
``executorch::runtime::set_option(backend, Span<BackendOption>)`` and ``get_option`` in
libexecutorch.so (the library the bindings load) through ctypes, with ``BackendOption`` laid out
as runtime/backend/options.h declares it: a 64-byte key, then a ``std::variant<bool, int,
std::array<char, 256>>`` (256 bytes of storage, then its one-byte index, padded to 4). Every
option set is read back through ``get_option``: a layout that does not match is detected and
nothing is claimed. Knows that layout and the option keys; nothing about programs.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

BACKEND = b"XnnpackBackend"
KEY_BYTES, VALUE_BYTES = 64, 256
_KINDS = {bool: 0, int: 1, str: 2}  # the variant's alternatives, in order


class _Option(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char * KEY_BYTES), ("value", ctypes.c_uint8 * VALUE_BYTES),
                ("index", ctypes.c_uint8), ("_pad", ctypes.c_uint8 * 3)]


class _Span(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(_Option)), ("length", ctypes.c_size_t)]


@functools.cache
def _library():
    """libexecutorch.so as the bindings loaded it (one backend registry), or None; looked up once."""
    try:
        from .et_runtime import portable_lib

        portable_lib()  # loads the library and registers the backends
        import executorch
    except ImportError:
        return None
    path = Path(executorch.__path__[0]).resolve() / "lib" / "libexecutorch.so"
    try:
        lib = ctypes.CDLL(str(path))
        setter = lib._ZN10executorch7runtime10set_optionEPKcNS0_4SpanINS0_13BackendOptionEEE
        getter = lib._ZN10executorch7runtime10get_optionEPKcNS0_4SpanINS0_13BackendOptionEEE
    except (OSError, AttributeError):
        return None
    for fn in (setter, getter):
        fn.argtypes, fn.restype = [ctypes.c_char_p, _Span], ctypes.c_uint32
    return setter, getter


def _option(key: str, value: bool | int | str | None) -> _Option:
    opt = _Option()
    opt.key = key.encode()
    if value is not None:
        kind = type(value)
        opt.index = _KINDS[kind]
        raw = (bytes([value]) if kind is bool else int(value).to_bytes(4, "little", signed=True) if kind is int
               else value.encode()[:VALUE_BYTES - 1])
        ctypes.memmove(ctypes.addressof(opt) + KEY_BYTES, raw, len(raw))
    return opt


def _value(opt: _Option, kind: type):
    raw = bytes(bytearray(opt.value))
    if opt.index != _KINDS[kind]:
        return None
    return bool(raw[0]) if kind is bool else int.from_bytes(raw[:4], "little", signed=True) if kind is int \
        else raw.split(b"\0", 1)[0].decode()


def set_options(**options: bool | int | str) -> bool:
    """Set XNNPACK's ``options`` (e.g. ``weight_cache_enabled=True``) for programs loaded from now
    on; True only where the runtime took each one and reads it back as set."""
    fns = _library()
    if fns is None:
        return False
    setter, getter = fns
    for key, value in options.items():
        arr = (_Option * 1)(_option(key, value))
        if setter(BACKEND, _Span(arr, 1)) != 0:
            return False
        back = (_Option * 1)(_option(key, None))
        back[0].index = _KINDS[type(value)]
        if getter(BACKEND, _Span(back, 1)) != 0 or _value(back[0], type(value)) != value:
            return False
    return True


def weight_cache(on: bool) -> bool:
    """XNNPACK's weight cache on or off for the programs loaded next; True where the runtime took it.
    Packed weights are shared by their data keys, so it is only for a program whose weights no
    other loaded program holds different values under (adapter versions reuse their keys:
    weight_sharing.py decides)."""
    return set_options(weight_cache_enabled=on)
