"""Offline training of a drafter's LoRA adapter and acceptance head on stored records, in epochs,
resumable: the daemon's own trainers (OnlineTrainer + HeadTrainer, interleaved, the round's
defaults) walk a fixed shuffled schedule of record ids, and a checkpoint (adapter, head, both
optimisers, the head sampler's state, the schedule position) is written atomically every few
updates, so a process killed at any moment resumes where its last checkpoint stood and ends with
the weights an uninterrupted run would have.

Knows records, trainers and checkpoint files; nothing about where records come from (jobs/distill.py).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from omnidraft.fsio import atomic_path
from omnidraft.models.acceptance import AcceptanceHead
from omnidraft.train.head_trainer import AdaptiveTrainer, HeadTrainer
from omnidraft.train.records import Record
from omnidraft.train.trainer import OnlineTrainer
from omnidraft.train.tuning import RoundConfig


def schedule(ids: list[int], epochs: int, interval: int, seed: int = 0) -> list[int]:
    """Record ids in training order: ``epochs`` shuffled passes, each cut to whole updates."""
    out: list[int] = []
    for e in range(epochs):
        order = list(ids)
        random.Random(seed + e).shuffle(order)
        out += order[: len(order) // interval * interval]
    return out


def _tuples(x):
    """``random.getstate()`` as saved (torch keeps tuples, but be safe with lists)."""
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


@dataclass
class Progress:
    done: int  # schedule entries trained
    total: int
    seconds: float  # training wall time so far (over every resume)


def train(model, head: AcceptanceHead, order: list[int], read: Callable[[int], bytes], checkpoint: Path,
          cfg: RoundConfig = RoundConfig(), every: int = 8,
          on_progress: Callable[[Progress], None] | None = None) -> Progress:
    """Train ``model`` (peft-wrapped drafter) and ``head`` over the records ``order`` names
    (``read(id)`` gives a record's bytes), resuming from ``checkpoint`` when it exists and writing
    it every ``every`` updates and at the end. Returns the final progress."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    distill = OnlineTrainer(model, cfg.train)
    heads = HeadTrainer(head, model, cfg.head)
    trainer = AdaptiveTrainer(distill, heads, "interleaved")
    done, seconds = 0, 0.0
    if checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=True, map_location="cpu")  # the loads copy to the model's device
        if state["order"] != order:
            raise ValueError(f"{checkpoint} was written for another schedule")
        set_peft_model_state_dict(model, state["adapter"])
        head.load_state_dict(state["head"])
        distill.opt.load_state_dict(state["opt"])
        heads.opt.load_state_dict(state["head_opt"])
        done, seconds = int(state["done"]), float(state["seconds"])
        # the head's replay buffer then was the last records added; its sampler as it stood
        trainer.replay.extend(Record.from_bytes(read(rid)) for rid in order[max(0, done - trainer.replay.maxlen):done])
        trainer.rnd.setstate(_tuples(state["rnd"]))

    def save() -> None:
        with atomic_path(checkpoint) as tmp:
            torch.save({"order": order, "done": done, "seconds": seconds, "rnd": trainer.rnd.getstate(),
                        "adapter": get_peft_model_state_dict(model), "head": head.state_dict(),
                        "opt": distill.opt.state_dict(), "head_opt": heads.opt.state_dict()}, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())

    interval = cfg.train.update_interval
    model.train()
    updates = 0
    while done < len(order):
        t0 = time.perf_counter()
        for rid in order[done:done + interval]:
            trainer.add(Record.from_bytes(read(rid)))
        done += interval
        seconds += time.perf_counter() - t0
        updates += 1
        if updates % every == 0 or done >= len(order):
            save()
        if on_progress:
            on_progress(Progress(done, len(order), seconds))
    model.eval()
    return Progress(done, len(order), seconds)
