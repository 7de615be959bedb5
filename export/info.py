"""program.json: the record of how an exported program was made and which tensors its .ptd
files must hold, written by the export and read by everything that serves or checks a program.

Knows the JSON fields and their format number; nothing about exporting, .ptd files or running
programs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from omnidraft.errors import OmniDraftError

FORMAT = 5  # 3: a target program takes the positions whose logits to return and is batch-invariant;
# 4: it returns at most max_rows of them a call, and every program's token embedding is int8;
# 5: a call reads at most max_width tokens, and its caches are planned once (export/planning.py)
TARGET_FORMATS = (3, 4, 5)  # what loads (format 3: max_rows is max_seq); an older one is rebuilt by `omnidraft pair`
DRAFTER_FORMATS = (2, 3, 4, 5)  # drafter programs did not change from format 2 but for the int8 embedding


@dataclass
class ProgramInfo:
    """program.json: how a .pte was made and what its .ptd must hold."""

    program_id: str  # sha256 of the .pte, first 16 hex digits
    config: dict
    vocab_size: int
    hidden_size: int
    max_seq: int
    adapter_keys: dict[str, list]  # FQN -> [shape list, dtype name]: every adapter tensor
    ptd_keys: dict[str, list]  # FQN -> the .ptd keys that carry its bytes (its FQN, its content key)
    format: int = FORMAT
    export_seconds: float = 0.0
    pte_bytes: int = 0
    versions: dict = field(default_factory=dict)
    eos_ids: list[int] = field(default_factory=list)  # the model's generation_config EOS ids
    decode_window: int = 0  # > 0: a target's one-token method "decode" reads the first this many slots
    max_rows: int = 0  # a target's most positions' logits a call (0: max_seq, as before format 4)
    max_width: int = 0  # the most tokens a call reads (0: max_seq, as before format 5)

    @property
    def role(self) -> str:
        return self.config.get("role", "drafter")

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> "ProgramInfo":
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise OmniDraftError(f"cannot read {path}: {err}", "re-run `omnidraft export`") from err
        role = data.get("config", {}).get("role", "drafter")
        if data.get("format") not in (TARGET_FORMATS if role == "target" else DRAFTER_FORMATS):
            raise OmniDraftError(f"{path} ({role} program) has format {data.get('format')}, expected {FORMAT}",
                                 "re-run `omnidraft export`")
        return cls(**data)

    @property
    def current(self) -> bool:
        """Made by this version's export (else `omnidraft pair` builds it again)."""
        return self.format == FORMAT
