"""The trainers on a GPU compute what they compute on the CPU (fp32): the distillation loss and
one update, the acceptance head's inputs and labels, the guard's teacher-forced acceptance. Runs
only where torch sees a CUDA device (the device tier); CI has none."""

import copy

import pytest
import torch

from omnidraft.train.head_trainer import head_batch
from omnidraft.train.trainer import OnlineTrainer, TrainConfig, attach_lora
from omnidraft.train.tuning import match_hits

from ..conftest import recorded_pair

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the device tier)")

PROMPTS = ["def add(a, b):\n", "The weather today is", "Liste des courses: ", "x = [1, 2, 3]\n"]


@pytest.fixture(scope="module")
def setup(smollm_tok, qwen_tok):
    torch.backends.cuda.matmul.allow_tf32 = False  # the comparison is fp32 against fp32
    return recorded_pair(smollm_tok, qwen_tok, PROMPTS)


@pytest.mark.parametrize("loss", ["dm+ngram", "dm+approx"])
def test_a_gpu_update_is_the_cpus(setup, loss):
    d, _, _, records = setup
    cfg = TrainConfig(loss=loss, lr=1e-3, update_interval=len(records))
    cpu = attach_lora(copy.deepcopy(d.model), cfg)
    gpu = copy.deepcopy(cpu).to("cuda")
    losses = []
    for model in (cpu, gpu):
        trainer = OnlineTrainer(model, cfg)
        with torch.no_grad():
            before = float(trainer.loss(records)[0])
        for rec in records:
            trainer.add(rec)
        with torch.no_grad():
            losses.append((before, float(trainer.loss(records)[0])))
    (cb, ca), (gb, ga) = losses
    assert gb == pytest.approx(cb, rel=1e-4) and ga == pytest.approx(ca, rel=1e-3) and ca < cb


def test_the_heads_inputs_and_the_guards_acceptance_are_the_cpus(setup):
    d, _, _, records = setup
    cpu = copy.deepcopy(d.model)
    gpu = copy.deepcopy(d.model).to("cuda")
    h, e, y = head_batch(cpu, records, "greedy")
    gh, ge, gy = head_batch(gpu, records, "greedy")
    assert gh.device.type == "cuda" and torch.equal(gy.cpu(), y)
    assert torch.allclose(gh.cpu(), h, atol=1e-4) and torch.allclose(ge.cpu(), e)
    assert torch.equal(match_hits(gpu, records), match_hits(cpu, records))
