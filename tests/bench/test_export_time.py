"""`omnidraft bench export` (omnidraft/bench/export_time.py) on the tiny drafter: each setting's
export in a child process of its own, the result compared run to run by its export seconds
(tests/measure/test_history.py: the headline); bad settings are one line. Its two settings are
none and shipped: the drafter's program is byte for byte the same without every shortcut of the
lowering and with them all (the target's is tests/export/test_lower.py's)."""

import pytest

from omnidraft.bench.export_time import ExportOptions, run_export
from omnidraft.cli import main
from omnidraft.errors import OmniDraftError

from ..test_session import models  # noqa: F401  (the tiny pair the Session tests run, as model folders)


def test_each_setting_exports_the_same_program_and_is_compared_by_its_seconds(tmp_path, monkeypatch, models):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    drafter, _ = models
    out = tmp_path / "results"
    got = run_export(ExportOptions((drafter,), ("none", "shipped")), out=out)
    row = got["rows"][drafter]
    assert row["role"] == "drafter" and set(row["export_s"]) == {"none", "shipped"}
    assert row["same_program"] and len({r["sha256"] for r in got["runs"]}) == 1  # no shortcut changes a byte
    assert row["seconds"] == row["export_s"]["shipped"] > 0 and got["headline"] == "seconds"  # the history's figure
    assert "same program bytes" in sorted(out.glob("bench-export-*.md"))[-1].read_text()


def test_bad_export_options_are_one_line_errors(capsys):
    with pytest.raises(OmniDraftError, match="unknown export setting 'fast'"):
        ExportOptions(settings=("fast",))
    assert main(["bench", "export", "--widths", "1,2"]) == 2
    assert "--widths: not an option of the export suite" in capsys.readouterr().err
    assert main(["bench", "pair", "--models", "a,b"]) == 2
    assert "--models: not an option of the pair suite" in capsys.readouterr().err
