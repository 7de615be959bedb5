"""Runtime ``auto`` (pairs/build.py): the exported program when there is one that loads, else
the eager model with one note; an explicit ``executorch`` keeps the error."""

import json

import pytest

from omnidraft.errors import OmniDraftError
from omnidraft.pairs import build


@pytest.fixture
def eager(monkeypatch, tmp_path):
    """An empty home; load_model stands in for the eager model (the resolution is what is tested)."""
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    loaded = []
    monkeypatch.setattr(build, "load_model", lambda name, dtype: loaded.append((name, dtype)) or f"eager {name}")
    return loaded


def _stale_target_program(name: str):
    """A target program folder as an older OmniDraft wrote it (format 2)."""
    from omnidraft.export.layout import program_dir

    d = program_dir(name, build.TARGET_QUANT, 1024, role="target")
    d.mkdir(parents=True)
    (d / "program.pte").write_bytes(b"not read")
    (d / "program.json").write_text(json.dumps({"format": 2, "config": {"role": "target"}}))
    return d


def test_auto_without_a_program_runs_eager_with_a_note(eager):
    notes = []
    assert build.local_target("some-target", "auto", note=notes.append) == "eager some-target"
    assert build.load_drafter("some-drafter", "auto", note=notes.append) == "eager some-drafter"
    assert len(notes) == 2 and all("no exported program" in n for n in notes)


def test_auto_with_a_program_that_cannot_load_runs_eager_and_says_why(eager):
    pytest.importorskip("executorch")
    _stale_target_program("old-target")
    notes = []
    assert build.local_target("old-target", "auto", note=notes.append) == "eager old-target"
    assert len(notes) == 1 and "cannot be loaded" in notes[0] and "format 2" in notes[0]
    with pytest.raises(OmniDraftError, match="format 2"):
        build.local_target("old-target", "executorch")


def test_unknown_runtime_is_one_error():
    with pytest.raises(OmniDraftError, match="unknown runtime 'gpu'"):
        build.local_target("x", "gpu")
