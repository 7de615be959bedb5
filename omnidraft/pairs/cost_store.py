"""Where a pair's cost model is kept between Sessions: ``pairs/<pair>/cost.json`` (a llama.cpp
target's in cost-llamacpp.json beside it, so a pair measured on both keeps both), one record
(``CostRecord``: the model, the per-position acceptance counts behind its choice, and what it was
measured on: runtimes, CPU, threads; a Session on other runtimes or another CPU measures its own).
A Session's ``CostFile`` keeps what it learnt on top of what other Sessions of the pair kept there
meanwhile (pairs/cost_merge.py).

Knows files, locks and the record's JSON; what its terms mean is pairs/cost.py's, how they are
timed pairs/timing.py's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from omnidraft.decode.draft_length import CostModelK
from omnidraft.fsio import atomic_write_json, locked
from omnidraft.pairs.cost import CostModel
from omnidraft.pairs.cost_merge import merge
from omnidraft.pairs.timing import REPS, WIDTHS, measure, measured_on, runtime_name

# how a field reads back from JSON (any other: a float)
_READ = {"verify_ms": lambda d: {int(w): float(ms) for w, ms in d.items()},
         "decode_scales": lambda d: {k: [float(v[0]), int(v[1])] for k, v in d.items()}}


@dataclass
class CostRecord:
    """What a cost file holds: ``reached[i]`` / ``accepted[i]``, rounds whose drafts reached
    position i and were accepted there (decode/draft_length.py); ``on``: what the timings are
    valid for (pairs/timing.py ``measured_on``)."""

    model: CostModel
    reached: list[float]
    accepted: list[float]
    on: dict

    def to_json(self) -> dict:
        """The record as its file holds it (a copy: later learning does not change it)."""
        return json.loads(json.dumps({"model": asdict(self.model), "reached": self.reached,
                                      "accepted": self.accepted, "on": self.on}))

    def copy(self) -> "CostRecord":
        return CostRecord.from_json(self.to_json())

    @classmethod
    def from_json(cls, data: dict) -> "CostRecord":
        """A file's record; its model's fields that it lacks (kept by an older version) at their defaults."""
        m = data["model"]
        model = CostModel(**{f.name: _READ.get(f.name, float)(m[f.name]) for f in fields(CostModel) if f.name in m})
        return cls(model, list(data.get("reached", [])), list(data.get("accepted", [])), data.get("on", {}))


def read(path: Path) -> CostRecord | None:
    """The record kept at ``path`` (None: none, or a damaged file)."""
    try:
        return CostRecord.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def load(path: Path, on: dict) -> CostRecord | None:
    """The record kept at ``path`` when measured on ``on`` (the same runtimes, CPU and threads), else None."""
    saved = read(path)
    return saved if saved is not None and saved.on == on else None


def write(path: Path, mine: CostRecord, base: CostRecord | None = None) -> tuple[CostRecord, bool]:
    """Keep ``mine``. With ``base`` (the record this process last read or wrote there), what it
    learnt since is merged into what another Session wrote since (pairs/cost_merge.py). Returns
    (a copy of the record written, whether it merged another Session's)."""
    record = mine.to_json()
    merged = False
    with locked(path):
        theirs = read(path)
        if base is not None and theirs is not None and theirs.on == mine.on and theirs.to_json() != base.to_json():
            try:
                both = merge(base.to_json(), record, theirs.to_json())
                CostRecord.from_json(both)  # what the next load reads
                record, merged = both, True
            except (KeyError, TypeError, ValueError, AttributeError):  # a damaged file: this record replaces it
                pass
        atomic_write_json(path, record)
    return CostRecord.from_json(record), merged


def cost_file(pair_name: str, target_runtime: str) -> Path:
    """Where a pair's cost model on ``target_runtime`` (pairs/timing.py runtime_name) is kept."""
    from omnidraft.pairs.spec import pair_dir

    return pair_dir(pair_name) / ("cost-llamacpp.json" if target_runtime.startswith("llama.cpp") else "cost.json")


@dataclass
class CostFile:
    """A Session's cost file: where it is, what its timings are valid for, and the record this
    Session last read or wrote there (what it learnt since is what it merges into the file)."""

    path: Path
    on: dict
    base: CostRecord | None = None

    def keep(self, dl: CostModelK) -> None:
        """Keep ``dl``'s model and acceptance counts, merged with what other Sessions kept there
        meanwhile, and go on from the merged model."""
        self.base, merged = write(self.path, CostRecord(dl.model, dl.reached, dl.accepted, self.on), self.base)
        if merged:  # another Session's evidence joined this one's
            now = self.base.copy()
            vars(dl.model).update(vars(now.model))
            dl.reached, dl.accepted = now.reached, now.accepted
            dl.reestimate()


def _complete(saved: CostRecord) -> bool:
    """Whether ``saved`` holds every width of WIDTHS and a timed prompt read (else it is timed again)."""
    return set(WIDTHS) <= set(saved.model.verify_ms) and bool(saved.model.read_ms)


def for_pair(pair_name: str, target, drafter, eager_dtype: str, progress=None) -> tuple[CostModelK, CostFile]:
    """The pair's CostModelK on these runtimes: what an earlier session or `omnidraft pair` kept in
    the pair's folder when measured on the same runtimes, CPU and threads, else measured now (a
    few seconds) and kept; a model saved without every width of WIDTHS or without a timed prompt
    read is measured again, its acceptance counts kept. Returns (draft length, its CostFile)."""
    on = measured_on(runtime_name(target, eager_dtype), runtime_name(drafter, "fp32"))
    path = cost_file(pair_name, on["target_runtime"])
    saved = load(path, on)
    if saved is None or not _complete(saved):
        saved = CostRecord(measure(target, drafter, WIDTHS, reps=REPS, progress=progress),
                           saved.reached if saved else [], saved.accepted if saved else [], on)
        saved, _ = write(path, saved)
    return CostModelK(saved.model, saved.reached, saved.accepted), CostFile(path, on, saved.copy())


def kept_for(pair_name: str, target_runtime: str, drafter) -> tuple[CostModelK, CostFile] | None:
    """``for_pair``'s answer for a target not loaded yet: the cost model kept for the pair on the
    runtime named ``target_runtime`` (as pairs/timing.py runtime_name begins: ``llama.cpp``) with
    this drafter, CPU and threads, when one is kept complete; else None (load the target and time it)."""
    path = cost_file(pair_name, target_runtime)
    saved = read(path)
    here = measured_on(target_runtime, runtime_name(drafter, "fp32"))
    if (saved is None or not str(saved.on.get("target_runtime", "")).startswith(target_runtime)
            or {**saved.on, "target_runtime": target_runtime} != here
            or not _complete(saved)):
        return None
    return CostModelK(saved.model, saved.reached, saved.accepted), CostFile(path, saved.on, saved.copy())
