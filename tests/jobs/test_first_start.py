"""A first `omnidraft serve` or `generate` of a catalog pair nobody paired here pairs it first
(jobs/first_start.py) rather than run it silently on eager PyTorch; what a user named, a server's
target and a model folder of their own run as asked; the target alone gets its program built."""

from __future__ import annotations

import json

import pytest

from omnidraft import cli
from omnidraft.export.info import ProgramInfo
from omnidraft.export.layout import program_dir
from omnidraft.jobs import first_start
from omnidraft.pairs import programs
from omnidraft.pairs.build import TARGET_QUANT
from omnidraft.pairs.runtime_choice import FILE, machine
from omnidraft.pairs.settings import Runtime, TargetRef
from omnidraft.pairs.spec import pair_dir, pair_name

DRAFTER, TARGET = "smollm2-135m", "qwen2.5-coder-0.5b"


def _program(name: str, role: str | None = None) -> None:
    quant = TARGET_QUANT if role else programs.DRAFTER_QUANT
    path = program_dir(name, quant, programs.MAX_SEQ, **({"role": role} if role else {}))
    path.mkdir(parents=True)
    (path / "program.pte").write_bytes(b"")  # a program of this version's format (else it is built again)
    ProgramInfo("0", {"role": role or "drafter"}, 10, 4, 16, {}, {}).save(path / "program.json")


def _kept(on: dict) -> None:
    folder = pair_dir(pair_name(DRAFTER, TARGET))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FILE).write_text(json.dumps({"target": "executorch", "predicted_tokens_per_s": {}, "on": on}))


def test_a_pair_needs_pairing_until_its_programs_and_runtime_choice_are_here(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    target, auto = TargetRef(TARGET), Runtime()
    assert first_start.needs_pairing(DRAFTER, target, auto)
    assert first_start.needs_pairing(None, target, auto)  # the target alone: its program
    _program(DRAFTER)
    _program(TARGET, "target")
    assert not first_start.needs_pairing(None, target, auto)
    assert first_start.needs_pairing(DRAFTER, target, auto)  # no runtime chosen here yet
    _kept({**machine(), "cpu": "another CPU"})
    assert first_start.needs_pairing(DRAFTER, target, auto)  # chosen on another machine
    _kept(machine())
    assert not first_start.needs_pairing(DRAFTER, target, auto)


def test_what_the_user_named_runs_as_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    target = TargetRef(TARGET)
    assert not first_start.needs_pairing(DRAFTER, target, Runtime(target="eager"))
    assert not first_start.needs_pairing(DRAFTER, target, Runtime(drafter="eager"))
    assert not first_start.needs_pairing(DRAFTER, TargetRef("http://127.0.0.1:9/"), Runtime())
    assert not first_start.needs_pairing(str(tmp_path / "mine"), target, Runtime())  # a model folder of one's own
    assert not first_start.needs_pairing(None, TargetRef(str(tmp_path / "mine")), Runtime())


def test_generate_pairs_a_pair_first_after_its_options_are_checked(tmp_path, monkeypatch, capsys):
    """The first `omnidraft generate` of an unpaired catalog pair runs `omnidraft pair` before the
    Session loads; a bad option is refused before that (nothing is built for a typo)."""
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    calls = []

    class Stop(Exception):
        pass

    def pair(target, drafter, *, say, exact):
        calls.append((drafter, target.ref, exact))
        say("pairing ...")
        raise Stop  # the Session would load next

    monkeypatch.setattr("omnidraft.jobs.pairing.pair", pair)
    assert cli.main(["generate", "--drafter", DRAFTER, "--target", TARGET, "--prompt", "hi", "-k", "9"]) == 2
    assert cli.main(["generate", "--drafter", DRAFTER, "--target", TARGET, "--prompt", "hi",
                     "--temperature", "-1"]) == 2
    assert calls == []
    with pytest.raises(Stop):
        cli.main(["generate", "--drafter", DRAFTER, "--target", TARGET, "--prompt", "hi"])
    assert calls == [(DRAFTER, TARGET, False)]
    err = capsys.readouterr().err
    assert "is not paired on this machine: pairing it first" in err and "pairing ..." in err
