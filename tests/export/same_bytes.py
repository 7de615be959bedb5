"""Export one tiny model twice, with one of the lowering's shortcuts and without it."""

import contextlib
import copy

from ..conftest import tiny, vocab_len


def programs_with_and_without(shortcut: str, role: str, tok, tmp_path, monkeypatch, seed: int,
                              module=None, without=contextlib.nullcontext):
    """The program.pte bytes of a tiny qwen2 ``role`` (drafter, or a two-method target) exported
    with ``shortcut`` (a name in ``module``, default ``export.lower``) and with it replaced by
    ``without`` (default a no-op context)."""
    import omnidraft.export.lower as lower

    base = tiny("qwen2", vocab_len(tok), seed=seed)
    cfg = lower.ExportConfig(drafter="tiny", quant="8da8w", max_seq=128, lora_rank=4, head_width=16,
                             role=role, decode_window=64)
    export = lower.export_drafter if role == "drafter" else lower.export_target
    export(copy.deepcopy(base), tmp_path / "with", cfg, log=lambda s: None)
    monkeypatch.setattr(module or lower, shortcut, without)
    export(copy.deepcopy(base), tmp_path / "without", cfg, log=lambda s: None)
    return tuple((tmp_path / d / "program.pte").read_bytes() for d in ("with", "without"))
