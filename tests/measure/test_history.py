"""A run is compared with the last comparable one (measure/history.py): same suite, CPU, threads
and options."""

import json

from omnidraft.measure import history


def result(tps: float, commit: str = "a" * 40, **options) -> dict:
    return {"suite": "pair", "date": "2026-12-02T07:00:00+00:00", "commit": commit, "dirty": False,
            "cpu": {"model": "Xeon", "line": "..."}, "threads": 2, "options": {"code": 2, **options},
            "rows": {"omnidraft pair": {"tokens_per_s": tps, "per_prompt": [[1, 1.0]]},
                     "target alone (eager)": {"tokens_per_s": 10.0}}}


def test_a_second_run_says_its_change_against_the_first(tmp_path):
    path = tmp_path / "history.jsonl"
    assert history.append(path, result(20.0)) is None
    assert history.changes(None, result(20.0))[0].startswith("First run")
    before = history.append(path, result(22.0, commit="b" * 40))
    lines = history.changes(before, result(22.0, commit="b" * 40))
    assert "aaaaaaaaa" in lines[0] and "bbbbbbbbb" in lines[0]
    assert "- omnidraft pair: 22.00 tokens/s, was 20.00 (+10.0%)" in lines
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(kept) == 2 and "per_prompt" not in kept[0]["rows"]["omnidraft pair"]


def test_only_runs_with_the_same_options_are_compared_and_a_torn_line_is_skipped(tmp_path):
    path = tmp_path / "history.jsonl"
    history.append(path, result(20.0))
    with open(path, "a") as f:
        f.write('{"suite": "pair", "cpu": "Xe')  # a run killed mid-write
        f.write("\n")
    assert history.append(path, result(30.0, code=4)) is None  # other options: nothing comparable
    assert history.append(path, result(25.0))["rows"]["omnidraft pair"]["tokens_per_s"] == 20.0


def test_a_result_whose_rows_are_not_rates_is_compared_by_its_headline(tmp_path):
    path = tmp_path / "history.jsonl"

    def export(seconds: float) -> dict:
        return {"suite": "export", "date": "2026-12-02T07:00:00+00:00", "commit": "c" * 40, "dirty": False,
                "cpu": {"model": "Xeon", "line": "..."}, "threads": 2, "options": {}, "headline": "seconds",
                "rows": {"smollm2-135m": {"seconds": seconds, "role": "drafter"}}}

    history.append(path, export(40.0))
    before = history.append(path, export(30.0))
    assert "- smollm2-135m: 30.00 seconds, was 40.00 (-25.0%)" in history.changes(before, export(30.0))
