"""Integration tier (-m integration): the real Qwen2.5-Coder-0.5B exported as the 8da8w target
program the product runs (once per test run), its first LAYERS of 24 layers: the same real
weights, embeddings, 151k-id LM head, attention and quantised matmuls at their real widths, in
under a minute instead of 2-4 (depth changes nothing the program does per layer, and a position's row
goes through every layer alike). Batch invariance on real text: a position's logits inside a
w-token call are, bit for bit, those of the same position computed one token per call; and the
pair's greedy output through the program (the real SmolLM2 drafter, k = 3) is the program's own
greedy output. (Was scripts/check_batch_invariance.py.)"""

import pytest
import torch

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.decode.target import LocalTarget
from omnidraft.decode.text import encode_prompt
from omnidraft.models.loading import load_model, load_tokenizer
from omnidraft.prompts import CHAT_PROMPTS, humaneval
from omnidraft.propose.config import SpecConfig
from omnidraft.translate.state import PairState

from ..conftest import once_per_run

pytest.importorskip("executorch")
pytestmark = pytest.mark.integration

TARGET = "qwen2.5-coder-0.5b"
WIDTHS = (2, 4, 8)
LAYERS = 2


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.export.lower import ExportConfig, export_target, scheme_fields

    def build(folder):
        model = load_model(TARGET, dtype="fp32").model
        model.model.layers = model.model.layers[:LAYERS]
        model.config.num_hidden_layers = LAYERS
        if getattr(model.config, "layer_types", None):
            model.config.layer_types = model.config.layer_types[:LAYERS]
        cfg = ExportConfig(drafter=TARGET, **scheme_fields("8da8w"), max_seq=512, role="target")
        export_target(model, folder / "prog", cfg, log=lambda _s: None)

    folder, _ = once_per_run(tmp_path_factory, f"real-target-8da8w-{LAYERS}-layers", build)
    return ExecuTorchLM(folder / "prog", name=TARGET)


@pytest.mark.parametrize("prompt, chat", [(humaneval(limit=1, start=3)[0], False), (CHAT_PROMPTS[0], True)])
def test_the_real_target_program_is_batch_invariant_and_the_pair_equals_its_own_greedy(program, prompt, chat):
    ttok, dtok = load_tokenizer(TARGET), load_tokenizer("smollm2-135m")
    verifier = LocalTarget(program)
    ids = encode_prompt(ttok, prompt, chat=chat)
    own = generate_ar(verifier, ttok, prompt, max_new_tokens=48, chat=chat).token_ids
    for w in WIDTHS:
        program.reset()
        program.prefill(ids)
        wide = program.extend(own[:w]).logits  # [w, V]: the continuation's rows in one call
        program.truncate(len(ids))
        alone = torch.cat([program.extend([t]).logits for t in own[:w]])  # [w, V]: one token per call
        assert torch.equal(wide, alone), (w, float((wide - alone).abs().max()))
    drafter = load_model("smollm2-135m", dtype="fp32")
    pair = PairState(dtok, ttok, drafter.vocab_size, program.vocab_size)
    spec = generate_speculative(drafter, verifier, pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(3),
                                max_new_tokens=48, chat=chat)
    assert spec.token_ids == own
