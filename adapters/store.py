"""Versioned per-pair adapter store: each version is a folder of safetensors weights plus JSON
(peft's adapter_config.json and our meta.json), published atomically by renaming a finished
temp folder, listed, deleted, and loaded into a running peft model without reloading the base.

Knows folders and peft's save/load; nothing about training or decoding.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

from omnidraft.errors import OmniDraftError

_VERSION = re.compile(r"^v(\d{4,})$")


class AdapterStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _pair_dir(self, pair: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", pair):
            raise OmniDraftError(f"bad pair name {pair!r}", "use letters, digits, '.', '_' or '-'")
        return self.root / pair

    def versions(self, pair: str) -> list[str]:
        d = self._pair_dir(pair)
        if not d.is_dir():
            return []
        return sorted((p.name for p in d.iterdir() if _VERSION.match(p.name)),
                      key=lambda n: int(n[1:]))

    def list(self, pair: str) -> list[dict]:
        out = []
        for v in self.versions(pair):
            meta = self._pair_dir(pair) / v / "meta.json"
            out.append({"version": v, **(json.loads(meta.read_text()) if meta.is_file() else {})})
        return out

    def latest(self, pair: str) -> str | None:
        vs = self.versions(pair)
        return vs[-1] if vs else None

    def path(self, pair: str, version: str | None = None) -> Path:
        version = version or self.latest(pair)
        if version is None or not (self._pair_dir(pair) / version).is_dir():
            raise OmniDraftError(f"no adapter {version or '(any)'} for pair {pair}",
                                 "train one first (omnidraft pair / the daemon)")
        return self._pair_dir(pair) / version

    def publish(self, pair: str, model, meta: dict | None = None, extra: dict | None = None,
                adapter_name: str = "default") -> str:
        """Save ``model``'s adapter as the next version; returns it. ``extra``: more tensors
        to save beside it (name -> state dict, e.g. an acceptance head)."""
        from safetensors.torch import save_file

        d, version, tmp = self._next(pair)
        model.save_pretrained(str(tmp), selected_adapters=[adapter_name])
        src = tmp / adapter_name if (tmp / adapter_name).is_dir() else tmp
        for name, state in (extra or {}).items():
            save_file({k: v.contiguous() for k, v in state.items()}, str(src / f"{name}.safetensors"))
        return self._commit(d, version, tmp, src, meta)

    def publish_folder(self, pair: str, folder: Path, meta: dict | None = None) -> str:
        """Publish a finished version folder made elsewhere (peft's adapter files, a head, e.g. a
        pre-adapted adapter shipped with the package) as the next version; returns it."""
        d, version, tmp = self._next(pair)
        shutil.copytree(folder, tmp)
        return self._commit(d, version, tmp, tmp, meta)

    def _next(self, pair: str) -> tuple[Path, str, Path]:
        """(the pair's folder, the next version's name, a fresh temp path to build it in)."""
        d = self._pair_dir(pair)
        d.mkdir(parents=True, exist_ok=True)
        last = self.latest(pair)
        version = f"v{(int(last[1:]) + 1) if last else 1:04d}"
        tmp = d / f".tmp-{version}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        return d, version, tmp

    def _commit(self, d: Path, version: str, tmp: Path, src: Path, meta: dict | None) -> str:
        """Write meta.json into ``src`` (inside ``tmp``) and rename it to the version atomically."""
        (src / "meta.json").write_text(json.dumps({"published_at": time.time(), **(meta or {})}))
        try:
            os.rename(src, d / version)  # atomic; fails if another publisher took the number
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise OmniDraftError(f"adapter version {version} of {d.name} was published concurrently",
                                 "publish again")
        shutil.rmtree(tmp, ignore_errors=True)
        return version

    def delete(self, pair: str, version: str) -> None:
        path = self.path(pair, version)
        trash = path.with_name(f".del-{version}-{os.getpid()}")
        os.rename(path, trash)
        shutil.rmtree(trash)

    def load(self, model, pair: str, version: str | None = None) -> str:
        """Load a version into a peft model (once) and make it the active adapter. Returns the
        adapter name, ``<pair>@<version>`` with dots as underscores."""
        path = self.path(pair, version)
        name = f"{pair}@{path.name}".replace(".", "_")  # peft names are module keys: no dots
        if name not in model.peft_config:
            model.load_adapter(str(path), adapter_name=name)
        model.set_adapter(name)
        return name
