"""A target exported as an ExecuTorch program (export_target + ExecuTorchLM under LocalTarget):
every position's logits equal the eager model's and greedy speculative decoding through it
equals its own greedy decoding token for token."""

import copy

import pytest
import torch

from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.errors import OmniDraftError
from omnidraft.propose.config import SpecConfig

from ..conftest import tiny, vocab_len

pytest.importorskip("executorch")


@pytest.fixture(scope="module")
def target_program(qwen_tok, tmp_path_factory):
    """The `cross` fixture's tiny qwen2 target (seed 2), exported fp32 as a target program."""
    from omnidraft.export.lower import ExportConfig, export_target

    base = tiny("qwen2", vocab_len(qwen_tok), seed=2)
    base.generation_config.eos_token_id = [7, 9]
    out = tmp_path_factory.mktemp("target") / "prog"
    info = export_target(copy.deepcopy(base), out, ExportConfig(drafter="tiny-t", quant="fp32", max_seq=128,
                                                                  head_width=16, role="target"),
                         log=lambda s: None)
    return base, out, info


def test_every_position_logits_equal_eager(target_program):
    from omnidraft.device.runtime import ExecuTorchLM

    base, out, info = target_program
    assert info.role == "target" and not any(".lora_" in n for n in info.adapter_keys)
    ids = [int(x) for x in torch.randint(0, 150000, (14,), generator=torch.Generator().manual_seed(0))]
    with torch.no_grad():
        ref = base(torch.tensor([ids])).logits[0]  # [14, V]
    lm = ExecuTorchLM(out)
    first = lm.extend(ids[:9])  # a prefill of 9: all 9 rows
    assert first.logits.shape == (9, base.config.vocab_size)
    lm.rollback(3)  # verification's rollback: rows after it must be recomputed, not reused
    rest = lm.extend(ids[6:14])
    got = torch.cat([first.logits[:6], rest.logits])
    assert (got - ref).abs().max() <= 1e-4
    assert lm.extend(ids[:2], last_only=True).logits.shape == (1, base.config.vocab_size)
    assert lm.eos_ids == {7, 9}


def test_greedy_speculative_through_program_equals_its_own_greedy(target_program, cross):
    """The program is the reference: the pair's greedy output through it, for several strategies
    and draft lengths, is token for token what the program decodes alone."""
    from omnidraft.device.runtime import ExecuTorchLM

    _, out, _ = target_program
    d, _, pair = cross
    target = ExecuTorchLM(out)
    for prompt in ("def fibonacci(n):\n", "The Eiffel Tower is in"):
        ref = generate_ar(target, pair.target_tok, prompt, max_new_tokens=24)
        for cfg in (SpecConfig("omnidraft", k=3), SpecConfig("tli", k=5), SpecConfig("slem", k=4)):
            got = generate_speculative(d, target, pair, prompt, cfg=cfg, max_new_tokens=24)
            assert got.token_ids == ref.token_ids, (prompt, cfg)


def test_target_config_is_checked():
    from omnidraft.export.lower import ExportConfig, export_target

    with pytest.raises(OmniDraftError, match="role"):
        ExportConfig(drafter="x", role="verifier")
    with pytest.raises(OmniDraftError, match="specvocab_k"):
        ExportConfig(drafter="x", role="target", specvocab_k=64)
    with pytest.raises(OmniDraftError, match="role='target'"):
        export_target(tiny("qwen2", 300), "unused", ExportConfig(drafter="x"))
