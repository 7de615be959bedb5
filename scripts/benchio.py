"""Shared by the benchmark scripts: where results go and how they are written."""

from __future__ import annotations

import datetime as dt
import json
import platform
import sys
from pathlib import Path


def stamp_report(**fields) -> dict:
    """The fields every report carries: the command, the date, the library versions."""
    import tokenizers
    import torch
    import transformers

    return {"command": " ".join([sys.executable] + sys.argv),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                         "machine": platform.machine(), "threads": torch.get_num_threads()},
            **fields}


def save(out: str | Path, name: str, report: dict, md: list[str]) -> Path:
    """Write <out>/<name>-<stamp>.json and .md, print the markdown; returns the path stem."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{name}-{dt.datetime.now().strftime('%Y%m%d-%H%M')}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return stem
