"""Pre-adapted adapters shipped with the package: for a catalog pair, the LoRA adapter and
acceptance head `omnidraft distill` aligned to that target offline (bf16, a few MB), pinned by
sha256 here, so a pair starts aligned before its first prompt.

``write`` turns a distilled version into the shippable folder (what `omnidraft/tools/build_adapters.py`
commits); ``install`` publishes a pair's shipped folder into an adapter store after checking its
pins. Knows the folder layout and the pins; nothing about training or decoding.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omnidraft.errors import OmniDraftError

ROOT = Path(__file__).parent / "pretrained"
FILES = ("adapter_model.safetensors", "head.safetensors")
# pair -> sha256 of each weight file (adapter_config.json and meta.json are plain text beside them)
PINS: dict[str, dict[str, str]] = {
    "smollm2-135m--qwen2.5-coder-0.5b": {"adapter_model.safetensors": "342f5a124e92d8ca7afd6a0c24ca4c3bcda47d2d0d0646fa743d788168664fa3", "head.safetensors": "436b9362c1c47b4120598246d54c022935c4a0cb75a17bcb87d7736052e65037"},
    "smollm2-135m--qwen2.5-coder-1.5b": {"adapter_model.safetensors": "6fde78b673f32d8a8a92082f9b1cb390f2af244fb736617ba2f2c15780e21879", "head.safetensors": "a893f4b9a454e40a397f50b89d072e5541ec6c615c493b44f7511508b01c2dd3"},
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def install(store, pair: str) -> str | None:
    """Publish ``pair``'s shipped adapter into ``store`` as its next version (None when the package
    ships none for it), at the rank it was trained at. A file whose sha256 differs from its pin is
    a one-line error."""
    import tempfile

    if pair not in PINS:
        return None
    folder = ROOT / pair
    for name, want in PINS[pair].items():
        path = folder / name
        if not path.is_file() or _sha256(path) != want:
            raise OmniDraftError(f"the shipped adapter file {path} is missing or not the pinned one",
                                 "reinstall omnidraft")
    meta = json.loads((folder / "meta.json").read_text())
    with tempfile.TemporaryDirectory(dir=store.root) as tmp:
        _padded(folder, Path(tmp), int(meta.get("trained_rank") or 0))
        return store.publish_folder(pair, Path(tmp), meta={**meta, "pre_adapted": True, "records_through": 0})


def _lora_pairs(state: dict) -> list[tuple[str, str]]:
    return [(k, k.replace("lora_A", "lora_B")) for k in sorted(state) if "lora_A" in k]


def _padded(folder: Path, dest: Path, rank: int) -> None:
    """``folder``'s adapter in ``dest`` with A and B zero-padded to ``rank`` (the same weight
    change; the programs take adapters of the rank they were exported with), and the head."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    config = json.loads((folder / "adapter_config.json").read_text())
    state = load_file(str(folder / FILES[0]))
    r = int(config["r"])
    if rank > r:  # B A (alpha / r) == B' A' (rank / rank)
        scale = float(config["lora_alpha"]) / r
        for ka, kb in _lora_pairs(state):
            a, b = state[ka], state[kb]  # [r, in], [out, r]
            state[ka] = torch.cat([a, a.new_zeros(rank - r, a.shape[1])])
            state[kb] = torch.cat([b * scale, b.new_zeros(b.shape[0], rank - r)], 1)
        config.update(r=rank, lora_alpha=rank)
    save_file(state, str(dest / FILES[0]))
    (dest / "adapter_config.json").write_text(json.dumps(config, indent=1))
    shutil.copy(folder / FILES[1], dest / FILES[1])


def write(version_dir: Path, dest: Path, meta: dict, drafter: str | None = None, rank: int | None = None) -> dict[str, str]:
    """A shippable copy of a published version: its weight files in bf16, its adapter config (the
    base model named ``drafter``, not a path of this machine) and ``meta``; with ``rank`` below the
    trained one, each module's weight change cut to its ``rank`` largest singular directions (the
    meta says how much of it is kept; ``install`` pads it back). Returns the new files' sha256."""
    import torch
    from safetensors.torch import load_file, save_file

    dest.mkdir(parents=True, exist_ok=True)
    config = json.loads((version_dir / "adapter_config.json").read_text())
    state = load_file(str(version_dir / "adapter_model.safetensors"))
    meta = {**meta, "trained_rank": int(config["r"])}
    if rank is not None and rank < int(config["r"]):
        scale, kept, total = float(config["lora_alpha"]) / int(config["r"]), 0.0, 0.0
        for ka, kb in _lora_pairs(state):
            u, s, vh = torch.linalg.svd(state[kb].float() @ state[ka].float() * scale, full_matrices=False)
            root = s[:rank].sqrt()
            state[ka], state[kb] = root[:, None] * vh[:rank], u[:, :rank] * root[None, :]
            kept, total = kept + float((s[:rank] ** 2).sum()), total + float((s ** 2).sum())
        config.update(r=rank, lora_alpha=rank)
        meta["shipped_rank"], meta["energy_kept"] = rank, round(kept / total, 4)
    if drafter:
        config["base_model_name_or_path"] = drafter
    save_file({k: v.bfloat16().contiguous() for k, v in state.items()}, str(dest / FILES[0]))
    head = load_file(str(version_dir / FILES[1]))
    save_file({k: v.bfloat16().contiguous() for k, v in head.items()}, str(dest / FILES[1]))
    (dest / "adapter_config.json").write_text(json.dumps(config, indent=1))
    (dest / "meta.json").write_text(json.dumps(meta, indent=1))
    return {name: _sha256(dest / name) for name in FILES}
