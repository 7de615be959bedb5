"""A target exported as an ExecuTorch program (export_target + ExecuTorchLM under LocalTarget):
every position's logits equal the eager model's, a position's logits are the same bits at any
call width (also quantised), and greedy speculative decoding through it equals its own greedy
decoding token for token."""

import pytest
import torch

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.decode.modes import default_verify_mode
from omnidraft.decode.target import LocalTarget
from omnidraft.errors import OmniDraftError
from omnidraft.propose.config import SpecConfig
from omnidraft.sampling import SamplingConfig

from ..conftest import once_per_run, tiny, vocab_len
from ..export import same_bytes

pytest.importorskip("executorch")


def _export(qwen_tok, tmp_path_factory, quant: str):
    """The tiny one-layer qwen2 target of tests/export/same_bytes.py as a target program, exported
    once per test run (conftest.once_per_run; its 8da8w program is the one test_lower.py ships)."""
    from omnidraft.export.info import ProgramInfo

    vocab = vocab_len(qwen_tok)
    if quant == "8da8w":
        prog, _ = same_bytes.shipped(tmp_path_factory, vocab)
    else:
        folder, _ = once_per_run(tmp_path_factory, f"target-{quant}",
                                 lambda folder: same_bytes.export(vocab, folder / "prog", quant))
        prog = folder / "prog"
    return same_bytes.model(vocab), prog, ProgramInfo.load(prog / "program.json")


@pytest.fixture(scope="module")
def target_program(qwen_tok, tmp_path_factory):
    return _export(qwen_tok, tmp_path_factory, "fp32")


@pytest.fixture(scope="module")
def quantised_target(qwen_tok, tmp_path_factory):
    return _export(qwen_tok, tmp_path_factory, "8da8w")


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


def test_a_positions_logits_do_not_depend_on_the_call_width(quantised_target):
    """Batch invariance, bit for bit, on the quantised program: the w-th position's row inside a
    w-token call equals that position computed one token per call (custom_sdpa's multi-token
    path differed in the last bits, which int8 activation quantisation turned into ~0.5-logit
    differences on the real 0.5B target)."""
    from omnidraft.device.runtime import ExecuTorchLM

    _, out, _ = quantised_target
    lm = ExecuTorchLM(out)
    ids = [int(x) for x in torch.randint(0, 150000, (40,), generator=torch.Generator().manual_seed(1))]
    for w in (2, 4, 8):
        lm.reset()
        lm.prefill(ids[:30])
        wide = lm.extend(ids[30:30 + w]).logits  # [w, V]
        lm.truncate(30)
        alone = torch.cat([lm.extend([t]).logits for t in ids[30:30 + w]])  # [w, V]
        assert torch.equal(wide, alone), (w, float((wide - alone).abs().max()))
        lm.truncate(30)
        assert torch.equal(lm.extend(ids[30:30 + w], last_only=True).logits, alone[-1:])


def test_the_one_token_method_reads_the_window_and_agrees_with_forward_across_its_edge(quantised_target):
    """One token at a time runs the ``decode`` method (attention over the first 64 slots) until
    the context reaches 64, then ``forward`` (all 128): the rows equal a wide call's bit for bit on
    both sides of the edge, and a write through either method is what the other reads."""
    from omnidraft.device.runtime import ExecuTorchLM

    _, out, info = quantised_target
    assert info.decode_window == 64
    lm = ExecuTorchLM(out)
    calls = {"decode": [], "forward": []}  # the width of each call, by the method it runs
    lm.decode, lm.method = _Recorded(lm.decode, calls["decode"]), _Recorded(lm.method, calls["forward"])
    ids = [int(x) for x in torch.randint(0, 150000, (70,), generator=torch.Generator().manual_seed(3))]
    lm.prefill(ids[:58])
    alone = torch.cat([lm.extend([t]).logits for t in ids[58:70]])  # positions 58..69: 6 in the window
    assert len(calls["decode"]) == 6 and len(calls["forward"]) == 1 + 6
    lm.truncate(58)
    wide = lm.extend(ids[58:70]).logits  # [12, V], one forward call
    assert torch.equal(wide, alone), float((wide - alone).abs().max())


def test_a_call_for_more_positions_than_the_program_returns_goes_in_pieces_with_the_same_rows(quantised_target):
    """A target program returns at most max_rows positions' logits a call (its planned logits
    buffer is max_rows x V, not max_seq x V); a wider extend is split, and being batch-invariant,
    its rows are the ones a call per piece of any size gives."""
    from omnidraft.device.runtime import ExecuTorchLM

    _, out, info = quantised_target
    assert info.max_rows == 64 and info.current
    lm = ExecuTorchLM(out)
    ids = [int(x) for x in torch.randint(0, 150000, (100,), generator=torch.Generator().manual_seed(4))]
    lm.prefill(ids[:10])
    widths = []
    lm.method = _Recorded(lm.method, widths)
    wide = lm.extend(ids[10:100])  # 90 positions
    assert widths == [64, 26] and wide.logits.shape == (90, info.vocab_size) and lm.length == 100
    lm.truncate(10)
    pieces = torch.cat([lm.extend(ids[i:i + 30]).logits for i in range(10, 100, 30)])
    assert torch.equal(wide.logits, pieces)


def test_a_prompt_longer_than_a_call_reads_goes_in_pieces_with_the_same_last_logits(quantised_target):
    """A program's call reads at most max_width tokens (its planned memory is sized for that); a
    longer prompt is read in pieces, and the last position's logits (and the cache after) are
    the ones one wide call gives. The width is lowered here: the tiny program's is its max_seq."""
    from omnidraft.device.runtime import ExecuTorchLM

    _, out, info = quantised_target
    assert info.max_width == min(256, info.max_seq) and info.current
    lm = ExecuTorchLM(out)
    ids = [int(x) for x in torch.randint(0, 150000, (41,), generator=torch.Generator().manual_seed(5))]
    whole = lm.extend(ids[:40], last_only=True).logits
    after = lm.extend(ids[40:]).logits
    lm.reset()
    lm.info.max_width = 16
    widths = []
    lm.method = _Recorded(lm.method, widths)
    pieces = lm.extend(ids[:40], last_only=True).logits
    assert widths == [16, 16, 8] and lm.length == 40
    assert torch.equal(pieces, whole) and torch.equal(lm.extend(ids[40:]).logits, after)


class _Recorded:
    """A program method that appends each call's width (tokens fed) to ``widths``."""

    def __init__(self, method, widths: list):
        self.method, self.widths = method, widths

    def execute(self, inputs):
        self.widths.append(inputs[0].shape[1])
        return self.method.execute(inputs)


def test_a_batch_invariant_program_needs_the_llama_layer_loop():
    from omnidraft.export.program import DraftProgram
    from omnidraft.models.acceptance import AcceptanceHead

    with pytest.raises(OmniDraftError, match="batch-invariant"):
        DraftProgram(tiny("gemma3", 300), AcceptanceHead(32, 16), max_seq=8, all_logits=True,
                     batch_invariant=True)


@pytest.mark.parametrize("quant", ["fp32", "8da8w"])
def test_greedy_speculative_through_program_equals_its_own_greedy(quant, target_program, quantised_target, cross):
    """The program is the reference: the pair's greedy output through it, for several strategies
    and draft lengths, is token for token what the program decodes alone."""
    from omnidraft.device.runtime import ExecuTorchLM

    _, out, _ = target_program if quant == "fp32" else quantised_target
    d, _, pair = cross
    target = ExecuTorchLM(out)
    for prompt in ("def fibonacci(n):\n", "The Eiffel Tower is in"):
        ref = generate_ar(LocalTarget(target), pair.target_tok, prompt, max_new_tokens=24)
        for cfg, k in ((SpecConfig("omnidraft"), 3), (SpecConfig("tli"), 5), (SpecConfig("slem"), 4)):
            verifier = LocalTarget(target, SamplingConfig(), default_verify_mode(cfg.strategy))
            got = generate_speculative(d, verifier, pair, prompt, cfg=cfg, k=FixedK(k), max_new_tokens=24)
            assert got.token_ids == ref.token_ids, (prompt, cfg, k)


def test_a_generation_keeps_the_prompt_prefix_the_program_holds(quantised_target, cross):
    """The prefill reads only what the cache does not hold already (the previous request's shared
    prefix, here its first 5 ids), alone and in the pair, and both outputs are what a fresh cache
    gives."""
    from omnidraft.device.runtime import ExecuTorchLM

    _, out, _ = quantised_target
    d, _, pair = cross
    target = ExecuTorchLM(out)
    first, second = "def fibonacci(n):\n    return", "def fibonacci(n):\n    if n"
    ids = pair.target_tok(second)["input_ids"]
    shared = next(i for i, (a, b) in enumerate(zip(pair.target_tok(first)["input_ids"], ids)) if a != b)
    fresh = generate_ar(LocalTarget(target), pair.target_tok, second, max_new_tokens=12).token_ids
    fed = []
    target.method = _Recorded(target.method, fed)
    for run in (lambda: generate_ar(LocalTarget(target), pair.target_tok, second, max_new_tokens=12),
                lambda: generate_speculative(d, LocalTarget(target), pair, second, cfg=SpecConfig("omnidraft"),
                                             k=FixedK(3), max_new_tokens=12)):
        generate_ar(LocalTarget(target), pair.target_tok, first, max_new_tokens=12)
        fed.clear()
        assert run().token_ids == fresh
        assert fed[0] == len(ids) - shared and shared >= 5


def test_target_config_is_checked():
    from omnidraft.export.lower import ExportConfig, export_target

    with pytest.raises(OmniDraftError, match="role"):
        ExportConfig(drafter="x", role="verifier")
    with pytest.raises(OmniDraftError, match="specvocab_k"):
        ExportConfig(drafter="x", role="target", specvocab_k=64)
    with pytest.raises(OmniDraftError, match="decode_window"):
        ExportConfig(drafter="x", role="target", decode_window=100)
    with pytest.raises(OmniDraftError, match="role='target'"):
        export_target(tiny("qwen2", 300), "unused", ExportConfig(drafter="x"))


_RUN_WITHOUT_EXPORTER = """
import json, sys
from omnidraft.device.runtime import ExecuTorchLM
lm = ExecuTorchLM(sys.argv[1])
ids = [int(lm.prefill([5, 17, 300, 4000]).logits[-1].argmax())]
for _ in range(5):
    ids.append(int(lm.extend([ids[-1]]).logits[-1].argmax()))
heavy = [m for m in ("executorch.exir", "torch._dynamo", "torch._inductor", "torchao") if m in sys.modules]
from executorch.exir import EdgeCompileConfig  # the real exporter still imports after it
from executorch.exir._serialize import _cord
print(json.dumps({"ids": ids, "heavy": heavy, "cord": _cord.Cord.__module__}))
"""


def test_a_program_runs_in_a_process_that_never_imports_the_exporter(quantised_target):
    """The runtime's bindings, the .ptd check and the custom and quantised ops' kernels load without
    executorch.exir's package (device/et_runtime.py, export/exir_parts.py): the same ids as here,
    where the exporter is loaded; the exporter can still be imported after."""
    import json
    import subprocess
    import sys

    from omnidraft.device.runtime import ExecuTorchLM

    _, prog, _ = quantised_target
    done = subprocess.run([sys.executable, "-c", _RUN_WITHOUT_EXPORTER, str(prog)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    lm = ExecuTorchLM(prog)
    ids = [int(lm.prefill([5, 17, 300, 4000]).logits[-1].argmax())]
    for _ in range(5):
        ids.append(int(lm.extend([ids[-1]]).logits[-1].argmax()))
    assert got["ids"] == ids
    assert got["heavy"] == [], f"imported by a run: {got['heavy']}"
    assert got["cord"] == "executorch.exir._serialize._cord"
