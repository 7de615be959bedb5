"""Which runtime a pair's target verifies on, on this CPU. Each runtime's speed is a measurement,
not a constant (the ExecuTorch program beats llama.cpp on one CPU and trails it on another:
../docs/cost-model.md), so `omnidraft pair` predicts the pair's decoding speed on each runtime it
can load (its own v(n), the drafter's cost and the acceptance the pairing measured). The fastest
prediction is kept, except where llama.cpp is predicted faster than the bit-exact program by less
than the predictions' error (NEAR): then the program is calibrated beside llama.cpp alone and
kept unless it ran slower (``settle``). A pairing on a runtime the user named keeps that one
(``keep``): a GGUF paired on llama.cpp is not converted for PyTorch by the next `auto` run. The
choice goes to pairs/<pair>/runtime.json with the CPU and thread count it was measured on. A
target runtime of ``auto`` then loads that one; without a choice kept for this machine, ``auto``
is the program when one is exported, else a ``.gguf`` target's llama.cpp (with the extra, not
with ``exact``), else PyTorch (pairs/build.py). ``exact`` keeps to the bit-exact runtimes: the
program (batch-invariant) and PyTorch; llama.cpp's multi-token calls are not batch-invariant.

Knows the file and the runtimes' names; nothing about loading or timing them.
"""

from __future__ import annotations

import json

from omnidraft.errors import OmniDraftError
from omnidraft.fsio import atomic_write_json
from omnidraft.pairs.spec import pair_dir

FILE = "runtime.json"
INEXACT = ("llamacpp",)  # runtimes whose verify calls are not batch-invariant
NEAR = 0.9  # the bit-exact runtime predicted within this of llama.cpp: measured before it loses


def machine() -> dict:
    """What a choice holds for: this CPU and torch's thread count (the programs' and llama.cpp's)."""
    import torch

    from omnidraft.device.cpu import cpu_info

    return {"cpu": cpu_info()["model"], "threads": torch.get_num_threads()}


def resolve(pair: str | None, asked: str, exact: bool) -> str:
    """The target runtime to load for ``pair``: ``asked`` unless it is ``auto``, then the choice
    kept for this machine (one ``exact`` allows), else ``auto``."""
    if exact and asked in INEXACT:
        raise OmniDraftError(f"target runtime {asked!r} is not bit-exact (its multi-token verify calls are not "
                             "batch-invariant)", "drop exact=True / --exact, or choose the executorch runtime")
    if asked != "auto" or pair is None:
        return asked
    kept = load(pair)
    if kept is None or kept["on"] != machine() or (exact and kept["target"] in INEXACT):
        return "auto"
    return kept["target"]


def load(pair: str) -> dict | None:
    """The kept choice: {"target", "predicted_tokens_per_s": {runtime: tokens/s}, "on"}, or None."""
    try:
        data = json.loads((pair_dir(pair) / FILE).read_text())
        return data if isinstance(data.get("target"), str) and isinstance(data.get("on"), dict) else None
    except (OSError, ValueError, AttributeError):
        return None


def first_choice(predicted: dict[str, float]) -> str:
    """The runtime to calibrate on (``predicted``: runtime -> decoding tokens/s): the fastest
    prediction, or the fastest bit-exact runtime where an inexact one is predicted faster by less
    than the predictions' error (then the calibration decides: ``settle``)."""
    best = max(predicted, key=predicted.get)
    exact = [r for r in predicted if r not in INEXACT]
    if best in INEXACT and exact:
        program = max(exact, key=predicted.get)
        if predicted[program] >= NEAR * predicted[best]:
            return program
    return best


def settle(pair: str, predicted: dict[str, float], calibrated: str, vs_llamacpp: float | None) -> str:
    """Keep ``calibrated`` unless it is bit-exact, llama.cpp was a candidate and the pair ran slower
    than llama.cpp alone in the calibration (``vs_llamacpp``: the pair's tokens/s over llama.cpp
    alone's, same prompts, interleaved; None when not measured): then llama.cpp. The choice is
    written with the predictions and that measurement; returns it."""
    chosen = calibrated
    if calibrated not in INEXACT and vs_llamacpp is not None and vs_llamacpp < 1.0 and "llamacpp" in predicted:
        chosen = "llamacpp"
    keep(pair, chosen, predicted, calibrated, vs_llamacpp)
    return chosen


def keep(pair: str, chosen: str, predicted: dict[str, float], calibrated: str | None,
         vs_llamacpp: float | None) -> None:
    """``chosen`` is what ``auto`` loads for ``pair`` on this machine, kept with the predictions
    (runtime -> decoding tokens/s; the runtimes a Session may route between) and the calibration
    behind it."""
    atomic_write_json(pair_dir(pair) / FILE, {"target": chosen, "predicted_tokens_per_s":
                                              {r: round(v, 3) for r, v in predicted.items()},
                                              "measured_vs_llamacpp": vs_llamacpp, "calibrated_on": calibrated,
                                              "on": machine()})
