"""One fine-tuning round for a pair: read new verification records, train the drafter's LoRA
adapter and the acceptance head (interleaved) on them plus a fixed budget of earlier records
replayed, check the candidate on held-out records, and publish it atomically unless it is
significantly worse there (guard.py). The defaults were chosen on a real 300-prompt stream
(scripts/bench_trainer.py).

Crash safety: a round's trained record ids go into the published version's meta.json (atomic
with the weights); rejected rounds advance a cursor file. The next round starts after the larger
of the two, so after a kill -9 no record is lost and none is trained on twice *as new* in the
published lineage (replayed ones are listed apart). Knows the log, the adapter store and the
trainers; nothing about processes (daemon.py). It imports pairs.spec and export.layout because a
round publishes a version for a named pair and writes its .ptd for that pair's programs; neither
imports train/.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from dataclasses import dataclass, field
from contextlib import nullcontext
from typing import Callable, ContextManager

import torch

from omnidraft.models.acceptance import AcceptanceHead, HeadConfig
from omnidraft.models.lm import model_device
from omnidraft.errors import OmniDraftError
from omnidraft.fsio import atomic_write_json
from omnidraft.train.guard import judge
from omnidraft.train.head_trainer import AdaptiveTrainer, HeadTrainer
from omnidraft.pairs.spec import PairSpec, pair_dir
from omnidraft.train.records import Record
from omnidraft.train.trainer import OnlineTrainer, TrainConfig, _truncate, attach_lora, base_model


@dataclass(frozen=True)
class RoundConfig:
    min_records: int = 32  # train once this many new (non-held-out) records exist (a round's fixed cost
    # is 15-80 s here: one-step rounds of 8 records spent most of the daemon's time on it)
    max_records: int = 64  # at most this many per round
    holdout_every: int = 5  # records whose id is a multiple of this are held out, never trained on
    eval_records: int = 32  # the most recent held-out records judge a candidate
    guard_alpha: float = 0.05  # reject a candidate only when significantly worse at this level (guard.py)
    replay: int = 64  # earlier training records trained on again each round (a fixed budget, against forgetting)
    epochs: int = 1  # passes over the round's records (new + replayed), shuffled
    # LoRA at 1e-3 (1e-4 barely learns); forward KL(p || q'): on two real streams it raised held-out code
    # match by +0.04 / +0.05 over the paper's KL(q' || p), chat within +-0.005 (bench_trainer, README)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(lr=1e-3, divergence="fkl"))
    head: HeadConfig = field(default_factory=lambda: HeadConfig(labels="greedy"))

    def __post_init__(self):
        checks = [(self.min_records >= 1, "min_records", ">= 1"),
                  (self.max_records >= self.min_records, "max_records", ">= min_records"),
                  (self.holdout_every >= 2, "holdout_every", ">= 2"),
                  (self.eval_records >= 1, "eval_records", ">= 1"),
                  (0.0 < self.guard_alpha < 1.0, "guard_alpha", "in (0, 1)"),
                  (self.replay >= 0, "replay", ">= 0"), (self.epochs >= 1, "epochs", ">= 1")]
        for ok, name, want in checks:
            if not ok:
                raise OmniDraftError(f"RoundConfig.{name} must be {want}, got {getattr(self, name)!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "RoundConfig":
        """From JSON-like fields, ``train`` and ``head`` as nested dicts of the fields that differ
        from the defaults; an unknown name is an error."""

        def build(kind, fields: dict, where: str):
            known = {f.name for f in dataclasses.fields(kind)}
            bad = sorted(set(fields) - known)
            if bad:
                raise OmniDraftError(f"unknown {where} option {bad[0]!r}", f"known: {', '.join(sorted(known))}")
            return fields
        d, defaults = dict(build(cls, d, "round")), cls()
        if "train" in d:  # over the round's own defaults (its learning rate, say)
            train = dict(build(TrainConfig, d["train"], "train"))
            if "target_modules" in train:
                train["target_modules"] = tuple(train["target_modules"])
            d["train"] = dataclasses.replace(defaults.train, **train)
        if "head" in d:
            d["head"] = dataclasses.replace(defaults.head, **build(HeadConfig, d["head"], "head"))
        return cls(**d)


@torch.no_grad()
def match_hits(model, records: list[Record], max_tokens: int = 256,
               between: Callable[[], None] | None = None) -> torch.Tensor:
    """Teacher-forced greedy acceptance, position by position: [P] bool over the records'
    response positions that map to the target (direct or inside an n-gram), whether the
    drafter's argmax is the target's token. Needs no target model: the records hold its output.
    ``between``: called before each record (the daemon's guest check: it may wait, or raise)."""
    base, dev = base_model(model), model_device(model)
    hits = []
    for rec in records:
        if between:
            between()
        r = _truncate(rec, max_tokens)
        ids = r.draft_ids.long().unsqueeze(0)
        logits = base(input_ids=ids.to(dev)).logits[0, :-1]  # [L-1, V] predicts positions 1..L-1
        ok = logits.argmax(-1).cpu() == ids[0, 1:]
        pos = torch.arange(1, r.length)
        use = (pos >= r.gen_start) & ((r.kl_row[1:] >= 0) | (r.ngram_p[1:] > 0))
        hits.append(ok[use])
    return torch.cat(hits) if hits else torch.zeros(0, dtype=torch.bool)


def cursor(spec: PairSpec, store) -> int:
    """Last record id consumed: the newer of the published lineage and rejected rounds."""
    through = 0
    latest = store.latest(spec.name)
    if latest:
        meta = store.path(spec.name, latest) / "meta.json"
        if meta.is_file():
            through = int(json.loads(meta.read_text()).get("records_through", 0))
    path = pair_dir(spec.name) / "cursor.json"
    if path.is_file():
        try:
            through = max(through, int(json.loads(path.read_text())["records_through"]))
        except (ValueError, KeyError):
            pass
    return through


def due(spec: PairSpec, log, store, cfg: RoundConfig = RoundConfig()) -> bool:
    """Whether a round would train now (``run_round`` would not answer "waiting"): one count of
    the new trainable records, no record read and no model loaded (what the idle daemon polls)."""
    interval = cfg.train.update_interval
    new = log.count(spec.name, after=cursor(spec, store), skip_every=cfg.holdout_every)
    return min(new, cfg.max_records) // interval * interval >= max(cfg.min_records, interval)


def _write_cursor(spec: PairSpec, through: int, info: dict) -> None:
    atomic_write_json(pair_dir(spec.name) / "cursor.json", {"records_through": through, **info})


def _history(spec: PairSpec, entry: dict) -> None:
    """Append one finished round to pairs/<name>/rounds.jsonl (the audit trail `status` shows)."""
    with open(pair_dir(spec.name) / "rounds.jsonl", "a") as f:
        f.write(json.dumps({"time": time.time(), **entry}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def history(spec: PairSpec) -> list[dict]:
    path = pair_dir(spec.name) / "rounds.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a torn last line after a crash
            continue
    return out


def load_trainable(spec: PairSpec, store, base_model, train: TrainConfig):
    """(peft drafter, acceptance head, version or None): the latest published adapter and head
    made trainable, or fresh ones (a fresh adapter takes ``train``'s rank and modules)."""
    from peft import PeftModel
    from safetensors.torch import load_file

    latest = store.latest(spec.name)
    if latest is None:
        return attach_lora(base_model, train), None, None
    path = store.path(spec.name, latest)
    model = PeftModel.from_pretrained(base_model, str(path), is_trainable=True)
    head_file = path / "head.safetensors"
    head = AcceptanceHead.from_state(load_file(str(head_file))) if head_file.is_file() else None
    return model, head, latest


def run_round(spec: PairSpec, log, store, base_model, cfg: RoundConfig = RoundConfig(), *,
              progress: Callable[[str], None] | None = None,
              wait_if_paused: Callable[[], None] | None = None,
              publishing: Callable[[], ContextManager] = nullcontext) -> dict:
    """One round. Returns {"status": "waiting" | "published" | "rejected", ...}. ``wait_if_paused``:
    called before each record trained on or judged (it may wait, or raise to abandon the round: nothing is written
    then, and its records stay for the next); ``publishing()``: held around what the round writes."""
    say = progress or (lambda _m: None)
    start = cursor(spec, store)
    rows = log.read(spec.name, after=start, limit=cfg.max_records * 2)
    train_rows = [r for r in rows if r[0] % cfg.holdout_every][: cfg.max_records]
    interval = cfg.train.update_interval
    train_rows = train_rows[: len(train_rows) // interval * interval]
    if len(train_rows) < max(cfg.min_records, interval):
        return {"status": "waiting", "new_records": len([r for r in rows if r[0] % cfg.holdout_every])}
    through = train_rows[-1][0]
    every = log.read(spec.name, after=0, limit=10**9)
    held = [Record.from_bytes(r[2]) for r in [r for r in every if r[0] % cfg.holdout_every == 0][-cfg.eval_records:]]
    earlier = [r for r in every if r[0] <= start and r[0] % cfg.holdout_every]
    rnd = random.Random(through)
    replayed = rnd.sample(earlier, min(cfg.replay, len(earlier)))
    schedule = []
    for _ in range(cfg.epochs):
        rows_e = train_rows + replayed
        if cfg.epochs > 1 or replayed:  # one pass over new records keeps the stream's order
            rnd.shuffle(rows_e)
        schedule += rows_e[: len(rows_e) // interval * interval]
    model, head, version = load_trainable(spec, store, base_model, cfg.train)
    head = head or AcceptanceHead(model.config.hidden_size, cfg.head.width)
    t0 = time.perf_counter()
    before = match_hits(model, held, between=wait_if_paused) if held else None  # yields as training does
    model.train()
    trainer = AdaptiveTrainer(OnlineTrainer(model, cfg.train, between=wait_if_paused), HeadTrainer(head, model, cfg.head), "interleaved")
    for n, (rid, _prompt, data) in enumerate(schedule):
        if wait_if_paused:
            wait_if_paused()
        trainer.add(Record.from_bytes(data))
        say(f"{spec.name}: trained on {n + 1}/{len(schedule)} records")
    model.eval()
    verdict = judge(before, match_hits(model, held, between=wait_if_paused), cfg.guard_alpha) if held else None
    info = {"records_from": train_rows[0][0], "records_through": through,
            "record_ids": [r[0] for r in train_rows], "replayed_ids": sorted(r[0] for r in replayed),
            "epochs": cfg.epochs, "base_version": version,
            **(verdict.to_dict() if verdict else {"acceptance_before": None, "acceptance_after": None}),
            "held_out": len(held),
            "distill_steps": trainer.distill.steps, "head_steps": trainer.head.steps,
            "seconds": round(time.perf_counter() - t0, 1)}
    with publishing():
        if verdict is not None and not verdict.publish:
            _write_cursor(spec, through, {"rejected": info})
            _history(spec, {"status": "rejected", **info})
            say(f"{spec.name}: candidate rejected, significantly worse on held-out records (acceptance "
                f"{verdict.before:.3f} -> {verdict.after:.3f}, p = {verdict.p_worse:.3g})")
            return {"status": "rejected", **info}
        new = store.publish(spec.name, model, meta=info, extra={"head": head.state_dict()})
        _write_cursor(spec, through, {"published": new})
        _history(spec, {"status": "published", "version": new, **info})
        say(f"{spec.name}: published {new}" + (f" (held-out acceptance {verdict.before:.3f} -> {verdict.after:.3f})"
                                               if verdict else ""))
        return {"status": "published", "version": new, "ptds": write_ptds(spec, store.path(spec.name, new), say),
                **info}


def write_ptds(spec: PairSpec, version_dir, say: Callable[[str], None]) -> int:
    """Write the new version's .ptd for each exported drafter program (the device swaps it in
    without converting); returns how many. A failure is a note: the version stays published."""
    from omnidraft.export.layout import publish_ptds

    try:
        return len(publish_ptds(spec.name, spec.drafter, version_dir))
    except OmniDraftError as err:
        say(f"{spec.name}: {err}")
        return 0
