"""Whether a pair whose target is a serving engine (an OpenAI-API target) should hand generation
to the engine: the engine generating alone server-side needs no per-token round trip, and on
some servers (llama-cpp-python's echo path costs ~0.1 s per prompt position) it beats the pair.
The pair's and the engine's tokens/s are first measured by `omnidraft pair`, then updated by
every generation (the engine's runs and the pair's probes, one every PROBE_EVERY generations),
and kept in the pair's folder (engine.json), which every Session of the pair folds its generations
into (each read and written again under a lock, so Sessions open at once keep each other's).

Knows those two figures and their file; nothing about HTTP, decoding or the Session.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from omnidraft.fsio import atomic_write_json, locked

PROBE_EVERY = 16  # engine generations between two pair generations (a new adapter may win)
WEIGHT = 0.25  # a new measurement's weight in the running estimate


@dataclass
class EngineChoice:
    path: Path
    pair_tokens_per_s: float | None = None
    engine_tokens_per_s: float | None = None
    since_probe: int = 0  # engine generations since the pair last ran

    @classmethod
    def load(cls, path: Path) -> "EngineChoice":
        """The kept figures, or none (a missing or unreadable file: the pair runs until measured)."""
        choice = cls(Path(path))
        choice._reload()
        return choice

    def _reload(self) -> None:
        """The file's figures in place of these (an unreadable file: these stay)."""
        try:
            data = json.loads(self.path.read_text())
            pair, engine = (None if data.get(k) is None else float(data[k])
                            for k in ("pair_tokens_per_s", "engine_tokens_per_s"))
            self.pair_tokens_per_s, self.engine_tokens_per_s = pair, engine
            self.since_probe = int(data.get("since_probe", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            pass

    def engine_now(self) -> bool:
        """Hand this generation to the engine: it is measured faster, and no probe is due."""
        if self.pair_tokens_per_s is None or self.engine_tokens_per_s is None:
            return False
        return self.engine_tokens_per_s > self.pair_tokens_per_s and self.since_probe < PROBE_EVERY

    def measured(self, pair_tokens_per_s: float, engine_tokens_per_s: float) -> None:
        """Both figures from a calibration (they replace what was kept)."""
        self.pair_tokens_per_s, self.engine_tokens_per_s, self.since_probe = pair_tokens_per_s, engine_tokens_per_s, 0
        self._save()

    def observe(self, engine: bool, tokens: int, seconds: float) -> None:
        """Fold one generation in: by the engine alone (``engine``) or by the pair."""
        if tokens < 1 or seconds <= 0:
            return
        rate = tokens / seconds
        key = "engine_tokens_per_s" if engine else "pair_tokens_per_s"
        with locked(self.path):
            self._reload()  # what the pair's other Sessions folded in meanwhile
            old = getattr(self, key)
            setattr(self, key, rate if old is None else (1 - WEIGHT) * old + WEIGHT * rate)
            self.since_probe = self.since_probe + 1 if engine else 0
            self._save()

    def _save(self) -> None:
        r = (lambda v: None if v is None else round(v, 3))
        atomic_write_json(self.path, {"pair_tokens_per_s": r(self.pair_tokens_per_s),
                                      "engine_tokens_per_s": r(self.engine_tokens_per_s),
                                      "since_probe": self.since_probe})
