"""`omnidraft bench` end to end on tiny models (omnidraft/bench/): the product through Session and
the target alone, interleaved, their greedy outputs equal, the result stamped with its commit,
written as JSON and markdown, and a second run compared with the first."""

import json

import pytest

from omnidraft.bench.run import run_suite
from omnidraft.bench.suites import Options, suite
from omnidraft.cli import main
from omnidraft.errors import OmniDraftError

from ..test_session import models  # noqa: F401  (the tiny pair the Session tests run, as model folders)


def test_a_suite_runs_the_product_beside_the_target_alone_and_compares_with_its_last_run(tmp_path, monkeypatch,
                                                                                         models):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    drafter, target = models
    opts = Options(drafter, target, {"code": 2, "copy": 1}, max_new_tokens=8, dtype="fp32", rows=("product", "target"))
    out = tmp_path / "results"
    first = run_suite(suite("pair"), opts, out=out)
    assert set(first["rows"]) == {"omnidraft pair", "target alone (eager)"}
    pair = first["rows"]["omnidraft pair"]
    assert pair["prompts"] == 3 and pair["equal"] == 3  # greedy, fp32: the target's own output
    assert pair["vs_reference"] > 0 and first["reference"] == "target alone (eager)"
    assert set(first["sets"]) == {"code", "copy"} and first["sets"]["code"]["omnidraft pair"]["prompts"] == 2
    assert first["commit"] and len(first["commit"]) == 40 and first["cpu"]["line"].endswith("2 threads")
    assert first["runtimes"]["omnidraft pair"] == {"eager": 3}  # where each generation ran
    md = sorted(out.glob("bench-pair-*.md"))[-1].read_text()
    assert "First run of this suite" in md and first["cpu"]["line"] in md and first["commit"][:12] in md
    run_suite(suite("pair"), opts, out=out)
    assert len((out / "history.jsonl").read_text().splitlines()) == 2
    md = sorted(out.glob("bench-pair-*.md"), key=lambda p: p.stat().st_mtime)[-1].read_text()
    assert "Against the last run" in md and "- omnidraft pair:" in md
    saved = json.loads(sorted(out.glob("bench-pair-*.json"), key=lambda p: p.stat().st_mtime)[-1].read_text())
    assert len(saved["rows"]["omnidraft pair"]["per_prompt"]) == 3


def test_bad_options_are_one_line_errors(capsys):
    with pytest.raises(OmniDraftError, match="unknown prompt set 'poems'"):
        Options(counts={"poems": 2})
    with pytest.raises(OmniDraftError, match="no prompts"):
        Options(counts={"code": 0})
    with pytest.raises(OmniDraftError, match="unknown benchmark suite"):
        suite("nope")
    assert main(["bench", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown benchmark suite 'nope'" in err[0]
    assert main(["bench", "pair", "--max-new-tokens", "0"]) == 2
    assert "max_new_tokens must be >= 1" in capsys.readouterr().err
    assert main(["bench", "memory", "--rows", "product,target; , ;target"]) == 2
    assert "a phase with no rows" in capsys.readouterr().err


def test_the_copy_suite_runs_follow_ups_on_the_target_alones_answers_and_every_engine_row(tmp_path, monkeypatch,
                                                                                          models):
    """A follow-up turn's earlier answer is the target alone's, the same text for every row; the
    pair with and without copies, transformers alone and with prompt lookup all run it, and the
    greedy rows' outputs equal the target alone's."""
    from omnidraft.bench.prompts import prompt_sets

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    drafter, target = models
    last = prompt_sets({"copy": 21})[-1]
    assert last.earlier and not last.answers  # answered by the run, before any row runs
    rows = ("product", "nocopies", "target", "transformers", "transformers-lookup")
    opts = Options(drafter, target, {"copy": 21}, max_new_tokens=6, dtype="fp32", rows=rows)
    got = run_suite(suite("copy"), opts, out=tmp_path / "results", keep=False)
    names = list(got["rows"])
    assert names == ["omnidraft pair", "omnidraft pair, no copies", "target alone (eager)",
                     "transformers target alone (fp32)", "transformers prompt lookup (fp32, 10 tokens)"]
    for name in ("omnidraft pair", "omnidraft pair, no copies", "transformers target alone (fp32)"):
        assert got["rows"][name]["equal"] == 21, name
    assert got["options"]["counts"] == {"copy": 21}


def test_a_suite_takes_its_own_prompts_unless_told_and_names_a_bad_row(models):
    drafter, target = models
    assert suite("copy").options(Options()).counts == {"copy": 24, "code": 4, "chat": 4}
    assert suite("copy").options(Options(counts={"chat": 1})).counts == {"chat": 1}
    with pytest.raises(OmniDraftError, match="no row 'nope'"):
        suite("pair").build(Options(drafter, target, rows=("nope",)), print)
    with pytest.raises(OmniDraftError, match="--adapters is for the adapters suite"):
        suite("copy").build(Options(drafter, target, adapters=("v0002",)), print)


def test_the_adapters_suite_runs_the_pair_on_each_adapter_beside_the_target(tmp_path, monkeypatch, models):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    drafter, target = models
    opts = Options(drafter, target, {"code": 2}, max_new_tokens=6, dtype="fp32", rows=("target", "product", "product@none"))
    got = run_suite(suite("adapters"), opts, out=tmp_path / "results", keep=False)
    assert list(got["rows"]) == ["target alone (eager)", "omnidraft pair", "omnidraft pair, adapter none"]
    assert all(got["rows"][n]["equal"] == 2 for n in ("omnidraft pair", "omnidraft pair, adapter none"))


def test_a_suite_in_phases_runs_each_beside_its_reference_then_sampled_on_the_rows_that_sample(tmp_path, monkeypatch,
                                                                                               models):
    """Two phases, each built and closed in turn with the reference; a sampled pass after each
    greedy one on the rows that sample (the Session's, with each prompt's seed), its ratios to the
    sampled reference and no equality counted; a row that cannot run here is named with why."""
    from dataclasses import replace

    from omnidraft.session import Session

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OMNIDRAFT_VLLM_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)  # no .venv-vllm here: the vllm row cannot run
    asked = []
    generate = Session.generate
    monkeypatch.setattr(Session, "generate", lambda self, *a, **kw: asked.append(kw.get("sampling")) or
                        generate(self, *a, **kw))
    drafter, target = models
    phased = replace(suite("pair"), phases=(("product", "target"), ("target", "transformers", "vllm")),
                     sampled=(0.8, 0.95))
    opts = Options(drafter, target, {"code": 2}, max_new_tokens=6, dtype="fp32")
    got = run_suite(phased, opts, out=tmp_path / "results", keep=False)
    assert list(got["rows"]) == ["omnidraft pair", "target alone (eager)", "omnidraft pair, sampled",
                                 "target alone (eager), sampled", "target alone (eager) (phase 2)",
                                 "transformers target alone (fp32)", "target alone (eager), sampled (phase 2)"]
    rows = got["rows"]
    assert rows["omnidraft pair"]["equal"] == 2 and rows["transformers target alone (fp32)"]["equal"] == 2
    assert rows["omnidraft pair, sampled"]["compared"] == 0 and rows["omnidraft pair, sampled"]["vs_reference"] > 0
    assert [p["reference"] for p in got["parts"]] == ["target alone (eager)", "target alone (eager), sampled",
                                                      "target alone (eager) (phase 2)",
                                                      "target alone (eager), sampled (phase 2)"]
    sampled = [s for s in asked if s is not None]
    assert len(sampled) == 6 and {(s.temperature, s.top_p) for s in sampled} == {(0.8, 0.95)}
    assert sorted({s.seed for s in sampled}) == [1000, 1001]  # each prompt's own seed, the same for every row
    assert "no vLLM here" in got["missing"]["vllm"]
    md = sorted((tmp_path / "results").glob("bench-pair-*.md"))[-1].read_text()
    assert "| phase |" in md and "Not run here: vllm: no vLLM here" in md


def test_a_phase_that_fails_keeps_the_phases_before_it_written(tmp_path, monkeypatch, models):
    """A later phase dying (a server's segfault 40 minutes in) raises, and the result file holds the
    finished phase's rows with why the rest is missing."""
    import json
    from dataclasses import replace

    from omnidraft.bench import baselines

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))

    def dies(self, *a, **kw):
        raise RuntimeError("the server died")

    monkeypatch.setattr(baselines.TransformersRow, "run", dies)
    drafter, target = models
    phased = replace(suite("pair"), phases=(("product", "target"), ("target", "transformers")))
    with pytest.raises(RuntimeError, match="the server died"):
        run_suite(phased, Options(drafter, target, {"code": 2}, max_new_tokens=6, dtype="fp32"),
                  out=tmp_path / "results", keep=False)
    written = json.loads(sorted((tmp_path / "results").glob("bench-pair-*.json"))[-1].read_text())
    assert list(written["rows"]) == ["omnidraft pair", "target alone (eager)"]
    assert written["rows"]["omnidraft pair"]["equal"] == 2
    assert written["incomplete"].startswith("phase 2 of 2 did not finish: RuntimeError: the server died")
    md = sorted((tmp_path / "results").glob("bench-pair-*.md"))[-1].read_text()
    assert "**Incomplete**: phase 2 of 2" in md


def test_the_memory_suite_recalls_a_streams_answers_on_held_out_work_and_leaves_the_pairs_memory_alone(
        tmp_path, monkeypatch, models):
    """The remembered row answers a stream of recurring work into a scratch memory, then recalls
    from it on held-out prompts (never in the stream) without adding to it; its greedy output is
    the target's own; the pair's own memory in the home is never touched."""
    from omnidraft.pairs.spec import pair_dir, pair_name

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no llama-server here: its row is reported missing, not skipped
    drafter, target = models
    phases = (("product", "target"), ("remembered-reopened", "remembered", "target", "llama-server-ngram-mod-used"))
    opts = Options(drafter, target, {"extract": 2, "code": 1}, max_new_tokens=16, dtype="fp32", stream=3,
                   phases=phases)  # as the 1.5B runs: its two pair Sessions do not fit memory together
    got = run_suite(suite("memory"), opts, out=tmp_path / "results", keep=False)
    name = "omnidraft pair, memory after 9 prompts of use"
    reopened = name + ", reopened as after a restart"
    assert list(got["rows"]) == ["omnidraft pair", "target alone (eager)", reopened, name,
                                 "target alone (eager) (phase 2)"]
    assert [p["phase"] for p in got["parts"]] == [1, 2] and got["options"]["phases"][0] == ["product", "target"]
    assert got["rows"][name]["equal"] == 3 and got["rows"]["omnidraft pair"]["recalled"] == 0
    assert got["rows"][reopened]["equal"] == 3
    state = got["states"][name]
    assert state["memory"]["spaces"][0]["entries"] == 9 and state["lookups"] > 0  # the stream only
    again = got["states"][reopened]  # its own index, rebuilt from the file
    assert again["lookups"] > 0 and again["index_bytes"] == state["index_bytes"] > 0
    assert [why for row, why in got["missing"].items() if "ngram-mod after" in row]
    assert got["options"]["stream"] == 3
    assert not (pair_dir(pair_name(drafter, target)) / "memory").exists()


def test_the_target_row_runs_where_the_pairs_rows_run_also_in_a_phase_without_the_product(monkeypatch):
    import types

    from omnidraft.bench import rows as bench_rows
    from omnidraft.bench import suites

    asked = []
    pair = types.SimpleNamespace(session=types.SimpleNamespace(target_runtime="executorch"))
    monkeypatch.setattr(bench_rows, "remembered", lambda *a, **k: pair)
    monkeypatch.setattr(bench_rows, "target_alone", lambda target, runtime: asked.append(runtime.target) or pair)
    opts = suites.Options("d", "t")
    suites._build(opts, print, ("target", "remembered"))  # the memory suite's second phase
    suites._build(opts, print, ("target",))  # no pair row: where a pair's first route runs (the program, if built)
    assert asked == ["executorch", "auto"]
