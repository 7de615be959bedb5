"""Integration tier (-m integration): the real SmolLM2-135M drafter and Qwen2.5-Coder-0.5B
target (and Gemma-3-270M), fp32, where greedy speculative output must equal the target's own.
The target's own greedy output of each HumanEval prompt is generated once and shared."""

import copy

import pytest
import torch

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.decode.modes import default_verify_mode
from omnidraft.decode.target import LocalTarget
from omnidraft.models.loading import load_model, load_tokenizer
from omnidraft.translate.state import PairState
from omnidraft.prompts import humaneval
from omnidraft.propose.config import SpecConfig
from omnidraft.sampling import SamplingConfig

pytestmark = pytest.mark.integration  # on one pytest-xdist worker (conftest.ONE_WORKER): its fixtures once

NEW_TOKENS = 24
LAYERS = 2  # of SmolLM2's 30 in the exported-drafter test


@pytest.fixture(scope="module")
def real_pair():
    dtok, ttok = load_tokenizer("smollm2-135m"), load_tokenizer("qwen2.5-coder-0.5b")
    d, t = load_model("smollm2-135m"), load_model("qwen2.5-coder-0.5b")
    return d, t, PairState(dtok, ttok, d.vocab_size, t.vocab_size)


@pytest.fixture(scope="module")
def own_greedy(real_pair):
    """HumanEval prompt i -> the target's own greedy token ids (generated on first use)."""
    _, t, pair = real_pair
    done = {}

    def get(i: int) -> tuple[str, list[int]]:
        if i not in done:
            prompt = humaneval(limit=1, start=i)[0]
            done[i] = prompt, generate_ar(LocalTarget(t), pair.target_tok, prompt, max_new_tokens=NEW_TOKENS).token_ids
        return done[i]

    return get


def test_generate_sensible_code(real_pair):
    _, t, pair = real_pair
    out = generate_ar(LocalTarget(t), pair.target_tok, "def fibonacci(n):", max_new_tokens=32)
    assert "return" in out.text and "n" in out.text and out.text.startswith("\n")


@pytest.mark.parametrize("strategy,prompts", [("omnidraft", 1), ("tli", 1), ("slem", 1), ("dtw", 1),
                                              ("slrs", 1)])
def test_greedy_equals_target_on_humaneval(real_pair, own_greedy, strategy, prompts):
    d, t, pair = real_pair
    totals = {"proposed": 0, "accepted": 0}
    for i in range(prompts):
        prompt, own = own_greedy(i)
        out = generate_speculative(d, LocalTarget(t, SamplingConfig(), default_verify_mode(strategy)), pair, prompt,
                                   cfg=SpecConfig(strategy), k=FixedK(4), max_new_tokens=NEW_TOKENS)
        assert out.token_ids == own, prompt
        totals["proposed"] += out.metrics["proposed"]
        totals["accepted"] += out.metrics["accepted"]
    rate = totals["accepted"] / totals["proposed"]
    print(f"{strategy}: acceptance {rate:.3f} over {prompts} HumanEval prompts")
    assert rate > 0.1  # a real drafter on real code is accepted often


def test_rollback_real_models_all_architectures():
    """Each real architecture: roll back n tokens and re-extend == fresh forward (<= 1e-4 fp32)."""
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"):
        lm = load_model(name)
        tok = load_tokenizer(name)
        ids = tok("def quicksort(arr):\n    if len(arr) <= 1:\n        return arr\n")["input_ids"]
        n = len(ids)
        lm.prefill(ids[: n - 6])
        lm.extend(ids[n - 6:])
        lm.rollback(4)
        out = lm.extend(ids[n - 4:]).logits
        with torch.no_grad():
            ref = lm.model(input_ids=torch.tensor([ids])).logits[0, n - 4:].float()
        assert (out - ref).abs().max().item() <= 1e-4, name


def test_exported_fp32_drafter_on_the_real_pair(real_pair, own_greedy, tmp_path):
    """SmolLM2-135M's real weights exported to an fp32 ExecuTorch program: logits match eager and
    the speculative loop on it keeps the target's greedy output. Its first 2 of 30 layers: the
    same embeddings, vocabulary, layer loop and LM head, exported in well under a minute instead
    of 227 s (a 621 MB program); depth changes nothing the program does per layer."""
    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.export.lower import ExportConfig, export_drafter
    from omnidraft.models.eager import CausalLM

    _, t, pair = real_pair
    model = load_model("smollm2-135m").model
    model.model.layers = model.model.layers[:LAYERS]
    model.config.num_hidden_layers = LAYERS
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:LAYERS]
    export_drafter(copy.deepcopy(model), tmp_path / "prog", ExportConfig(drafter="smollm2-135m", quant="fp32", max_seq=256),
                   log=print)
    lm, d = ExecuTorchLM(tmp_path / "prog"), CausalLM(model, f"smollm2-135m-{LAYERS}-layers")
    ids = pair.draft_tok("def quicksort(arr):\n    if len(arr) <= 1:")["input_ids"]
    diff = (lm.prefill(ids).logits[0] - d.prefill(ids).logits[0]).abs().max().item()
    print(f"fp32 program vs eager: max logit diff {diff:.2e}")
    assert diff <= 1e-3
    prompt, own = own_greedy(0)
    out = generate_speculative(lm, LocalTarget(t), pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(4),
                               max_new_tokens=NEW_TOKENS)
    assert out.token_ids == own, prompt
