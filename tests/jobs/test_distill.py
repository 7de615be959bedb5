"""`omnidraft distill` on tiny models with the real tokenizers: records, training and the guard's
verdict; the adapter published for the pair; a second run loads no target and publishes nothing
twice; a larger corpus makes only its new records and trains again; options it cannot honour are
one line."""

import dataclasses
import subprocess
import sys

import pytest
import torch

import omnidraft.train.teacher as teacher
from omnidraft.errors import OmniDraftError
from omnidraft.jobs.distill import DistillConfig, distill
from omnidraft.models.acceptance import HeadConfig
from omnidraft.pairs.spec import adapter_store, pair_name
from omnidraft.train.trainer import TrainConfig

from ..conftest import save_tiny, tiny, vocab_len

CFG = DistillConfig(code=4, chat=0, heldout=(2, 2), epochs=1, answer_tokens=24, heldout_tokens=12,
                    train=TrainConfig(lr=1e-3, divergence="fkl", max_tokens=128, update_interval=2, batch_size=2),
                    head=HeadConfig(labels="greedy", batch_size=2, max_tokens=128))


@pytest.fixture()
def pair_paths(tmp_path, monkeypatch, smollm_tok, qwen_tok):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    d = save_tiny(tiny("llama", vocab_len(smollm_tok), seed=1), smollm_tok, tmp_path / "drafter")
    t = save_tiny(tiny("qwen2", vocab_len(qwen_tok), seed=2), qwen_tok, tmp_path / "target")
    return str(d), str(t)


def test_distill_publishes_a_guarded_adapter_once_and_resumes_without_the_target(pair_paths, monkeypatch):
    drafter, target = pair_paths
    lines: list[str] = []
    report = distill(target, drafter, CFG, say=lines.append)
    assert report["corpus_records"] == 4 and report["held_out_records"] == 4 and report["updates"] == 4
    assert report["publish"] and report["version"] == "v0001"
    assert 0.0 <= report["acceptance_before"] <= 1.0 and report["corpus_target_positions"] > 0
    # the learning curve: the zero adapter, a mid-training point, the distilled adapter the guard judged
    assert [x for x, _ in report["curve"]] == [0, 2, 4]
    assert report["curve"][0][1] == pytest.approx(report["acceptance_before"], abs=1e-3)
    assert report["curve"][-1][1] == pytest.approx(report["acceptance_after"], abs=1e-3)
    meta = adapter_store().list(pair_name(drafter, target))[0]
    assert meta["distilled"] and meta["records_through"] == 0 and meta["updates"] == 4
    assert any(line.startswith("distill: corpus records 4/4") for line in lines)

    def no_target(*_a, **_k):
        raise AssertionError("a finished stage ran again")

    monkeypatch.setattr("omnidraft.pairs.build.local_target", no_target)
    again = distill(target, drafter, CFG, say=lines.append)
    assert again["version"] == "v0001" and adapter_store().versions(pair_name(drafter, target)) == ["v0001"]
    with pytest.raises(OmniDraftError, match="other options"):
        distill(target, drafter, dataclasses.replace(CFG, answer_tokens=16), say=lines.append)


def test_a_larger_corpus_makes_only_its_new_records_and_trains_again(pair_paths, monkeypatch):
    drafter, target = pair_paths
    small = dataclasses.replace(CFG, code=2)
    first = distill(target, drafter, small)
    assert first["corpus_records"] == 2 and first["version"] == "v0001"
    made: list[str] = []
    def counting(pair, tgt, prompt, chat, answer, topk):
        made.append(prompt)
        return original(pair, tgt, prompt, chat, answer, topk)

    original = teacher.teacher_record
    monkeypatch.setattr(teacher, "teacher_record", counting)
    lines: list[str] = []
    grown = distill(target, drafter, CFG, say=lines.append)
    assert len(made) == 2 and grown["corpus_records"] == 4  # the first two records were kept
    assert grown["records"]["seconds"] > first["records"]["seconds"] > 0  # the kept ones' time counted too
    assert any("training starts over on 4 corpus records" in line for line in lines)
    assert grown["updates"] == 4 and [x for x, _ in grown["curve"]][-1] == 4
    assert grown["version"] == "v0002"  # trained from the drafter itself on the larger corpus
    again = distill(target, drafter, small)  # the smaller corpus again: its records, retrained, nothing made
    assert len(made) == 2 and again["corpus_records"] == 2 and again["updates"] == 2


def test_bad_distill_options_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    with pytest.raises(OmniDraftError, match="unknown model 'nosuch'"):
        distill("nosuch", cfg=CFG)
    assert not (tmp_path / "home" / "pairs").exists()  # no pair registered for it
    with pytest.raises(OmniDraftError, match="epochs must be >= 1"):
        DistillConfig(epochs=0)
    with pytest.raises(OmniDraftError, match="heldout must be"):
        DistillConfig(heldout=(0, 0))  # the guard needs held-out prompts
    with pytest.raises(OmniDraftError, match="source must be one of"):
        DistillConfig(source="books")
    with pytest.raises(OmniDraftError, match="device must be cpu, cuda or cuda:N"):
        DistillConfig(device="gpu")
    out = subprocess.run([sys.executable, "-m", "omnidraft.cli", "distill", "--target", "qwen2.5-coder-0.5b",
                          "--code", "81"], capture_output=True, text=True, env={"OMNIDRAFT_HOME": str(tmp_path),
                                                                              "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "code must be in 0..80" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_torch_cannot_see_is_one_line_and_writes_nothing(tmp_path):
    env = {"OMNIDRAFT_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "omnidraft.cli", "distill", "--target", "qwen2.5-coder-0.5b",
                          "--device", "cuda"], capture_output=True, text=True, env=env)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "torch sees no CUDA device" in out.stderr
    assert not (tmp_path / "pairs").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the device tier)")
def test_distill_on_a_gpu_publishes_and_a_cpu_resumes_its_records(pair_paths):
    drafter, target = pair_paths
    gpu = distill(target, drafter, dataclasses.replace(CFG, device="cuda"))
    assert gpu["publish"] and gpu["version"] == "v0001" and gpu["config"]["device"] == "cuda"
    assert gpu["corpus_records"] == 4 and gpu["held_out_records"] == 4 and gpu["updates"] == 4
    # the records the GPU made train on the CPU with no target: another epoch count retrains from them
    cpu = distill(target, drafter, dataclasses.replace(CFG, epochs=2))
    assert cpu["records"]["seconds"] == gpu["records"]["seconds"] and cpu["updates"] == 8
    assert cpu["acceptance_before"] == pytest.approx(gpu["acceptance_before"], abs=1e-3)
