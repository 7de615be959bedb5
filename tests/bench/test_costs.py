"""`omnidraft bench costs` on the tiny models (omnidraft/bench/costs.py): every runtime present
timed at every width, a row's tokens/s one token a call, top-1 agreement with fp32 (1.0 for a
second fp32 copy of the model), the drafter's ms, the result stamped, plotted and compared with
the last run; its options checked, and a prompt suite's options refused by name."""

import json

import pytest

from omnidraft.bench.costs import CostOptions, agreement, run_costs
from omnidraft.cli import main
from omnidraft.errors import OmniDraftError

from ..test_session import models  # noqa: F401  (the tiny pair the Session tests run, as model folders)


def test_the_costs_suite_times_each_runtime_and_compares_with_its_last_run(tmp_path, monkeypatch, models):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    drafter, target = models
    opts = CostOptions(drafter, target, widths=(1, 2, 4), reps=1, rounds=2, agreement=2, max_new_tokens=4)
    out = tmp_path / "results"
    first = run_costs(opts, out=out)
    rows = first["rows"]
    assert set(rows) == {"transformers bf16", "transformers fp32"}  # no program exported, no GGUF
    for s in rows.values():
        assert sorted(s["v"]) == [1, 2, 4] and all(ms > 0 for ms in s["v"].values())
        assert s["tokens_per_s"] == round(1e3 / s["v"][1], 2)
    assert 0.0 <= rows["transformers bf16"]["top1_vs_fp32"] <= 1.0 and rows["transformers fp32"]["top1_vs_fp32"] is None
    assert list(first["drafter_ms_per_token"]) == [f"{drafter} transformers fp32"]
    assert first["commit"] and first["cpu"]["line"] in sorted(out.glob("bench-costs-*.md"))[-1].read_text()
    pytest.importorskip("matplotlib")
    assert sorted(out.glob("bench-costs-*.png"))
    run_costs(opts, out=out)
    md = sorted(out.glob("bench-costs-*.md"), key=lambda p: p.stat().st_mtime)[-1].read_text()
    assert "Against the last run" in md and "- transformers fp32:" in md
    saved = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [e["suite"] for e in saved] == ["costs", "costs"]


def test_agreement_is_one_for_the_reference_itself_and_counted_per_position(tmp_path, monkeypatch, models):
    from omnidraft.pairs.build import local_target

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    drafter, target = models
    opts = CostOptions(drafter, target, agreement=2, max_new_tokens=6)
    fp32 = local_target(target, "eager", dtype="fp32")
    got = agreement(opts, {"transformers fp32": fp32, "again": local_target(target, "eager", dtype="fp32"),
                           "bf16": local_target(target, "eager", dtype="bf16")}, lambda s: None)
    assert set(got) == {"again", "bf16"} and got["again"] == 1.0


def test_bad_cost_options_are_one_line_errors(capsys):
    with pytest.raises(OmniDraftError, match="including 1"):
        CostOptions(widths=(2, 4))
    with pytest.raises(OmniDraftError, match="rounds must be >= 1"):
        CostOptions(rounds=0)
    assert main(["bench", "costs", "--code", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--code: not an option of the costs suite" in err[0]
    assert main(["bench", "pair", "--widths", "1,2"]) == 2
    assert "--widths: not an option of the pair suite" in capsys.readouterr().err
    assert main(["bench", "costs", "--widths", "1,x"]) == 2
    assert "--widths must be comma-separated integers" in capsys.readouterr().err
