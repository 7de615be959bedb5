"""Building a pair's programs (pairs/programs.py): only what is missing, and an export that
fails is one line and the eager runtime, not a crash."""

from omnidraft.export.info import FORMAT, ProgramInfo
from omnidraft.export.layout import program_dir
from omnidraft.pairs import programs


def _fake_program(path, fmt: int = FORMAT):
    path.mkdir(parents=True, exist_ok=True)
    (path / "program.pte").write_bytes(b"")
    ProgramInfo("0", {"role": "drafter"}, 10, 4, 16, {}, {}, format=fmt).save(path / "program.json")


def test_only_missing_programs_are_built(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    todo = programs.missing("smollm2-135m", "qwen2.5-coder-0.5b")
    assert [label for label, _ in todo] == ["smollm2-135m (drafter)", "qwen2.5-coder-0.5b (target)"]
    assert todo[1][1][:2] == ["--target", "qwen2.5-coder-0.5b"]
    _fake_program(program_dir("smollm2-135m", programs.DRAFTER_QUANT, programs.MAX_SEQ))
    assert [label for label, _ in programs.missing("smollm2-135m", "qwen2.5-coder-0.5b")] == \
        ["qwen2.5-coder-0.5b (target)"]
    assert programs.missing("smollm2-135m", "http://127.0.0.1:9/") == []  # a remote target is not ours to build
    assert programs.ensure("smollm2-135m", "http://127.0.0.1:9/", say=print) == {}


def test_a_program_an_earlier_export_made_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    folder = program_dir("smollm2-135m", programs.DRAFTER_QUANT, programs.MAX_SEQ)
    _fake_program(folder, fmt=3)  # loads (fp32 embedding), but this version exports it smaller
    assert ProgramInfo.load(folder / "program.json").format == 3
    assert [label for label, _ in programs.missing("smollm2-135m", "http://127.0.0.1:9/")] == ["smollm2-135m (drafter)"]
    (folder / "program.json").write_text("{")  # unreadable: built again too
    assert len(programs.missing("smollm2-135m", "http://127.0.0.1:9/")) == 1
    _fake_program(folder)
    assert programs.missing("smollm2-135m", "http://127.0.0.1:9/") == []


def test_a_failed_export_is_one_line_and_the_eager_runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    _fake_program(program_dir("smollm2-135m", programs.DRAFTER_QUANT, programs.MAX_SEQ))
    said: list[str] = []
    out = programs.ensure("smollm2-135m", "no-such-model", say=lambda *a, **k: said.append(" ".join(a)))
    assert list(out) == ["no-such-model (target)"] and "no-such-model" in out["no-such-model (target)"]
    assert said[-1].endswith("it runs on eager PyTorch") and "\n" not in said[-1].strip()
    assert [label for label, _ in programs.missing("smollm2-135m", "no-such-model")] == \
        ["no-such-model (target)"]  # nothing half-written is taken for a program


def test_export_stage_lines():
    assert programs._stage("export: lowering to XNNPACK (26 s so far)\n") == "lowering to XNNPACK"
    assert programs._stage("export: torch.export (strict) of qwen2.5-coder-0.5b [8da8w], max_seq 1024") == \
        "torch.export"
    assert programs._stage("some library line") is None


def test_exports_run_one_at_a_time_and_each_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    started, real = [], programs.subprocess.Popen

    def popen(argv, **kw):  # no export may start while another still runs
        assert all(p.poll() is not None for p in started), "two exports at once"
        started.append(real(argv, **kw))
        return started[-1]

    monkeypatch.setattr(programs.subprocess, "Popen", popen)
    out = programs.ensure("no-such-drafter", "no-such-model", say=lambda *a, **k: None)
    assert len(started) == 2
    assert list(out) == ["no-such-drafter (drafter)", "no-such-model (target)"]
    assert "no-such-drafter" in out["no-such-drafter (drafter)"] and "no-such-model" in out["no-such-model (target)"]
