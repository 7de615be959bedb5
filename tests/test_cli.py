"""The `omnidraft` command is the Session's front door: `generate` runs the pair's published
adapter (or the one asked for), logs its verifications unless told not to, keeps the acceptance
it learnt, says which adapter ran, and leaks no library warning to the user's terminal."""

import json
import os
import subprocess
import sys

import pytest
import torch

from omnidraft import cli

from .test_session import FP32, PROMPTS, home, models  # noqa: F401 - fixtures


def _generate(capsys, drafter, target, *extra) -> tuple[int, dict | str]:
    rc = cli.main(["generate", "--drafter", drafter, "--target", target, "--prompt", PROMPTS[0],
                   "--max-new-tokens", "12", "--dtype", "fp32", "--json", *extra])
    out, err = capsys.readouterr()
    return rc, json.loads(out) if rc == 0 else err


def _publish_perturbed(session) -> str:
    """A version whose LoRA really changes the drafter (B not zero)."""
    from omnidraft.models.loading import load_model
    from omnidraft.train.trainer import TrainConfig, attach_lora

    model = attach_lora(load_model(session.spec.drafter).model, TrainConfig())
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(std=0.5)
    return session.store.publish(session.spec.name, model)


def test_generate_runs_the_published_adapter_and_logs_its_verifications(home, models, capsys):  # noqa: F811
    from omnidraft import Session
    from omnidraft.jobs.pairing import fresh_adapter

    drafter, target = models
    s = Session(drafter, target, runtime=FP32, log=False, k=2)
    v1 = fresh_adapter(s.store, s.spec.name, s.spec.drafter, s.base.model)
    v2 = _publish_perturbed(s)
    ref = s.generate(PROMPTS[0], max_new_tokens=12).token_ids  # greedy: the target's own, any adapter
    rc, out = _generate(capsys, drafter, target, "-k", "2")
    assert rc == 0 and out["adapter"] == v2 and out["logged"] and out["token_ids"] == ref
    from omnidraft.pairs.spec import log_path
    from omnidraft.train.records import Record
    from omnidraft.train.verlog import VerificationLog

    log = VerificationLog(log_path())
    rows = log.read(s.spec.name)
    assert len(rows) == 1 and rows[0][1] == PROMPTS[0] and Record.from_bytes(rows[0][2]).length > 0
    rc, out = _generate(capsys, drafter, target, "-k", "2", "--adapter", "none", "--no-log")
    assert rc == 0 and out["adapter"] is None and not out["logged"] and out["token_ids"] == ref
    rc, out = _generate(capsys, drafter, target, "-k", "2", "--adapter", v1, "--no-log")
    assert rc == 0 and out["adapter"] == v1
    assert log.count(s.spec.name) == 1  # --no-log logged nothing
    rc, err = _generate(capsys, drafter, target, "--adapter", "v0042")
    assert rc == 2 and err.count("\n") == 1 and "no adapter version 'v0042'" in err and v2 in err
    log.close()
    s.close()


def test_generate_keeps_the_acceptance_it_learnt(home, models, capsys):  # noqa: F811
    """Without -k the cost model chooses; what the generation saw of acceptance is saved for the next."""
    from omnidraft.pairs.spec import pair_dir, pair_name

    drafter, target = models
    rc, out = _generate(capsys, drafter, target)
    assert rc == 0 and "cost_model" in out["metrics"]
    saved = json.loads((pair_dir(pair_name(drafter, target)) / "cost.json").read_text())
    assert saved["reached"] and saved["reached"] == out["metrics"]["position_reached"]  # the first probe's counts


def test_no_library_warning_reaches_the_user(home, models, tmp_path):  # noqa: F811
    """A Session on PyTorch (the eager runtime, a published adapter loaded through PEFT) and the
    CLI print nothing of the libraries' own: every line on stderr is OmniDraft's."""
    from omnidraft import Session

    drafter, target = models
    s = Session(drafter, target, runtime=FP32, log=False, k=2)
    _publish_perturbed(s)
    s.close()
    code = ("import omnidraft\nfrom omnidraft.pairs.settings import Runtime\n"
            f"s = omnidraft.Session({drafter!r}, {target!r}, runtime=Runtime(dtype='fp32'), k=2)\n"
            "s.generate('def add(a, b):', max_new_tokens=8)\n"
            "s.generate('Hello', max_new_tokens=8, chat=True)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}  # the default filters
    for argv in ([sys.executable, "-c", code],
                 [sys.executable, "-m", "omnidraft.cli", "generate", "--drafter", drafter, "--target", target,
                  "--prompt", "def add(a, b):", "--max-new-tokens", "8", "--dtype", "fp32", "-k", "2"]):
        run = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        assert run.returncode == 0, run.stderr[-2000:]
        foreign = [line for line in run.stderr.splitlines()
                   if line.strip() and not line.startswith(("omnidraft:", "[omnidraft", "[ar]", "[omnidraft]", "  "))]
        assert not foreign, foreign


@pytest.mark.parametrize("argv,needle", [
    (["generate", "--target", "x", "--prompt", "p", "-k", "9"], "draft length k must be an integer in 0..8"),
    (["generate", "--target", "x", "--prompt", "p", "--quant", "8da4w", "--max-seq", "8"], "Runtime.max_seq must be >= 16"),
    (["generate", "--target", "x", "--prompt", "p", "--max-memory", "lots"], "not a memory size: 'lots'"),
    (["serve", "--target", "x", "--max-memory", "2T"], "not a memory size: '2T'"),
])
def test_bad_settings_are_one_line_before_anything_loads(argv, needle, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
