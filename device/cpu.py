"""This machine's CPU as the cost model keys its measurements and every benchmark table states
it: the model name, the SIMD flags that decide kernel speeds (AVX2, AVX-512 and its bf16/VNNI
parts, AMX), the physical cores and whether bf16 arithmetic is native.

Knows /proc/cpuinfo; nothing about models or timing.
"""

from __future__ import annotations

from omnidraft.device.threads import physical_cores


def cpu_info() -> dict:
    """This CPU's model name, the SIMD flags that decide kernel speeds, and cores."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    keep = sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c")))
    return {"model": model, "flags": keep, "cores": physical_cores(),
            "native_bf16": any(f in flags for f in ("avx512_bf16", "amx_bf16"))}
