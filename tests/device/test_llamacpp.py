"""The llama.cpp target runtime (device/llamacpp.py) on a tiny Qwen2 GGUF written with the `gguf`
package and the real Qwen2.5 tokenizer (export/gguf_write.py), its head sharpened (a random
head's next-token distribution is otherwise near uniform over 151k ids): the LM contract (logits, rollback,
the cached prefix kept), one-line errors, a Session verifying on it (greedy: llama.cpp's own
one-token-at-a-time output wherever its top-2 margin is not a near-tie), and sampling exact with
respect to the distributions its calls compute (the first two tokens, a chi-square per position),
and a conversation's state saved and restored (in RAM and through a SavedStates folder) continuing
as if read again, never restored from another load's weights. Skipped without the llamacpp extra;
CI builds it."""

from collections import defaultdict

import pytest
import torch

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_speculative
from omnidraft.decode.target import LocalTarget
from omnidraft.errors import OmniDraftError
from omnidraft.models.eager import CausalLM
from omnidraft.propose.config import SpecConfig
from omnidraft.sampling import SamplingConfig, probs

from ..conftest import once_per_run, save_tiny, tiny, vocab_len
from ..decode.test_lossless import ALPHA, _draws_for, _position_test

pytest.importorskip("llama_cpp", reason="the llamacpp extra (llama-cpp-python)")
from omnidraft.device.llamacpp import LlamaCppLM  # noqa: E402

HEAD_SCALE = 40.0  # a random head's logits have std ~0.16: sharpened, a few ids hold most of the mass
VOCAB = 151936  # the packaged Qwen2.5 GGUF's vocabulary (its token list)
PROMPT = "def add(a, b):"


def _hf_model():
    m = tiny("qwen2", VOCAB, seed=12)
    with torch.no_grad():
        m.lm_head.weight.mul_(HEAD_SCALE)
    return m


@pytest.fixture(scope="module")
def gguf(tmp_path_factory, qwen_tok):
    from omnidraft.export.gguf_write import write_hf_qwen2
    from omnidraft.models import catalog

    real = catalog.ensure_gguf("qwen2.5-coder-0.5b")
    folder, _ = once_per_run(tmp_path_factory, "tiny-gguf",
                             lambda d: write_hf_qwen2(_hf_model(), real, d / "tiny.gguf").name)
    return folder / "tiny.gguf"


@pytest.fixture()
def lm(gguf):
    return LlamaCppLM(gguf, n_ctx=256, threads=1)


def test_logits_follow_the_weights_and_the_cache_rolls_back(lm):
    ref = CausalLM(_hf_model())
    ids = [100, 2000, 30000, 151000, 7]
    full = lm.prefill(ids).logits  # [1, V]
    assert lm.length == 5 and lm.runtime.startswith("llama.cpp qwen2") and "F32" in lm.runtime
    expected = ref.prefill(ids).logits
    assert torch.allclose(full, expected, atol=2e-2) and int(full.argmax()) == int(expected.argmax())
    rows = lm.extend([11, 12, 13]).logits  # [3, V]
    lm.rollback(2)
    assert lm.tokens == ids + [11]
    again = lm.extend([12, 13]).logits
    assert torch.equal(again, rows[1:])  # the same call after a rollback: the same logits
    kept = lm.sync(ids + [11, 99]).logits  # the cached prefix is kept, only 99 fed
    assert lm.tokens == ids + [11, 99] and kept.shape == (1, VOCAB)


def test_bad_input_is_one_line_and_leaves_the_cache(lm, tmp_path):
    lm.prefill([1, 2, 3])
    with pytest.raises(ValueError, match="exceed the context window of 256"):
        lm.extend([5] * 254)
    with pytest.raises(ValueError, match="ids must be in"):
        lm.extend([VOCAB])
    assert lm.tokens == [1, 2, 3] and lm.extend([4]).logits.shape == (1, VOCAB)
    with pytest.raises(OmniDraftError, match="GGUF file not found"):
        LlamaCppLM(tmp_path / "missing.gguf")
    with pytest.raises(OmniDraftError, match="no hidden states"):
        lm.extend([5], hidden=True)


def _follow(lm, held: list[int], follow: list[int]) -> list[torch.Tensor]:
    """Logits of ``follow`` after ``held`` (already in ``lm``'s cache): one token, then the rest in one call."""
    assert lm.tokens == held
    return [lm.extend(follow[:1]).logits, lm.extend(follow[1:]).logits]  # [1, V], [len(follow) - 1, V]


def _same_logits(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.allclose(x, y, atol=1e-4) and torch.equal(x.argmax(-1), y.argmax(-1)) for x, y in zip(a, b))


def test_a_restored_conversation_continues_as_if_read_again(gguf):
    """Saved after reading A, restored after another conversation overwrote the cache (and into
    another load of the same file): the next calls' logits are those of a fresh load that read A."""
    ids, follow = list(range(1000, 1040)), [5, 77, 900, 12, 3000, 41]
    fresh = LlamaCppLM(gguf, n_ctx=256, threads=1)
    fresh.extend(ids)
    ref = _follow(fresh, ids, follow)
    lm = LlamaCppLM(gguf, n_ctx=256, threads=1)
    lm.extend(ids)
    saved = lm.state()
    assert lm.stateful and saved.ids == tuple(ids) and saved.values == () and saved.nbytes > 0
    lm.reset()
    lm.extend(list(range(2000, 2090)))  # another conversation, longer: every position A held rewritten
    lm.restore(saved)
    assert lm.length == len(ids) and _same_logits(ref, _follow(lm, ids, follow))
    lm.restore(saved)  # again, over the longer cache this conversation left
    assert _same_logits(ref, _follow(lm, ids, follow))
    other = LlamaCppLM(gguf, n_ctx=256, threads=1)
    other.restore(saved)
    assert _same_logits(ref, _follow(other, ids, follow))


def test_a_state_round_trips_through_a_state_folder(gguf, tmp_path):
    from omnidraft.device.saved_states import SUFFIX, SavedStates

    ids, follow = list(range(300, 370)), [9, 8, 7]
    lm = LlamaCppLM(gguf, n_ctx=256, threads=1)
    lm.extend(ids)
    store = SavedStates(ram_bytes=0, folder=tmp_path, disk_bytes=10**8)  # on disk only
    store.put(ids, {"target": lm.state()})
    ref = _follow(lm, ids, follow)
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 1
    again = LlamaCppLM(gguf, n_ctx=256, threads=1)  # as after a restart
    restarted = SavedStates(ram_bytes=10**8, folder=tmp_path, disk_bytes=10**8)
    found = restarted.best(ids + follow, {"target": again.weights})
    assert found.where == "disk" and found.shared == len(ids) and found.states["target"].ids == tuple(ids)
    again.restore(found.states["target"])
    assert _same_logits(ref, _follow(again, ids, follow))


def test_a_state_from_other_weights_is_not_used(gguf, tmp_path):
    """Another context size is another ``weights``: a folder's state is not offered to it, and a
    restore refuses it; a damaged blob is one line and leaves the cache empty and usable."""
    from dataclasses import replace

    from omnidraft.device.saved_states import SavedStates

    ids = list(range(50, 90))
    lm = LlamaCppLM(gguf, n_ctx=256, threads=1)
    lm.extend(ids)
    saved = lm.state()
    store = SavedStates(ram_bytes=10**8, folder=tmp_path, disk_bytes=10**8)
    store.put(ids, {"target": saved})
    other = LlamaCppLM(gguf, n_ctx=512, threads=1)
    assert other.weights != lm.weights and str(gguf.resolve()) in other.weights
    assert store.best(ids, {"target": other.weights}) is None
    assert SavedStates(ram_bytes=10**8, folder=tmp_path, disk_bytes=10**8).best(ids, {"target": other.weights}) is None
    other.extend([1, 2])
    with pytest.raises(OmniDraftError, match="from another GGUF, context size or llama.cpp build"):
        other.restore(saved)
    assert other.tokens == [1, 2]  # nothing changed
    with pytest.raises(OmniDraftError, match="could not restore a saved conversation state of 40 tokens") as err:
        lm.restore(replace(saved, keys=(saved.keys[0][:len(saved.keys[0]) // 2],)))
    assert "\n" not in str(err.value) and lm.tokens == []
    fresh = LlamaCppLM(gguf, n_ctx=256, threads=1)
    assert torch.equal(lm.extend(ids).logits, fresh.extend(ids).logits)  # the cache empty, as a fresh load's


def test_a_gguf_file_on_auto_runs_on_llama_cpp_unless_exact(gguf, tmp_path, monkeypatch, capfd):
    """A user's own GGUF with no exported program: `auto` runs it on llama.cpp, memory-mapped (alone
    too: one token a call, its own output); with `exact`, on PyTorch, dequantised with progress
    lines and no library bar."""
    from omnidraft import Session, TargetRef
    from omnidraft.pairs.build import local_target

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    notes = []
    assert isinstance(local_target(str(gguf), "auto", note=notes.append), LlamaCppLM)
    assert notes == [f"{gguf}: no exported program; running the GGUF on llama.cpp"]
    capfd.readouterr()
    assert isinstance(local_target(str(gguf), "auto", dtype="fp32", exact=True), CausalLM)
    err = capfd.readouterr().err
    assert "dequantising tensors: 0/" in err and "Converting and de-quantizing" not in err
    alone = Session(None, TargetRef(str(gguf)), log=False)
    assert alone.target_runtime == "llamacpp"
    alone.close()


def test_a_session_on_llamacpp_is_its_own_greedy_output(gguf, smollm_tok, qwen_tok, tmp_path, monkeypatch):
    """Paired on llama.cpp, the GGUF is what a Session with the default runtime (`auto`) loads."""
    from omnidraft import Runtime, Session, TargetRef
    from omnidraft.jobs.pairing import pair

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    drafter = str(save_tiny(tiny("llama", vocab_len(smollm_tok), seed=11), smollm_tok, tmp_path / "drafter"))
    named = Session(drafter, TargetRef(str(gguf)), k=3, runtime=Runtime(target="llamacpp"), log=False)
    report = pair(TargetRef(str(gguf)), drafter, target_runtime="llamacpp", calibration_s=0, llamacpp=False,
                  session=named, say=lambda *a, **k: None)
    named.close()
    assert report["runtimes"]["kept"] == "llamacpp"
    s = Session(drafter, TargetRef(str(gguf)), k=3, log=False)
    assert s.target_runtime == "llamacpp" and s.target_model.n_ctx >= 1024
    own = LocalTarget(LlamaCppLM(gguf, n_ctx=512, threads=1))
    for prompt in (PROMPT, "for i in range(10):", "The weather today"):
        ref, margins = [], []
        lm = own.model
        ctx = qwen_tok(prompt).input_ids
        row = lm.sync(ctx).logits[0]
        for _ in range(24):  # one token per call: llama.cpp's own greedy output, with its margins
            top = torch.topk(row, 2).values
            margins.append(float(top[0] - top[1]))
            ref.append(int(row.argmax()))
            row = lm.extend([ref[-1]]).logits[0]
        got = s.generate(prompt, max_new_tokens=24)
        assert got.metrics["target_runtime"] == "llamacpp"
        sure = next((i for i, m in enumerate(margins) if m < 1e-2), len(ref))  # up to a near-tie
        assert got.token_ids[:sure] == ref[:sure], prompt
    with pytest.raises(OmniDraftError, match="not bit-exact"):
        Session(drafter, TargetRef(str(gguf)), runtime=Runtime(target="llamacpp"), exact=True)
    s.close()


@pytest.mark.parametrize("strategy,mode,temperature", [("omnidraft", "point-mass", 1.0), ("tli", "rejection", 0.7)])
def test_sampling_follows_the_distributions_its_calls_compute(gguf, smollm_tok, qwen_tok, strategy, mode,
                                                              temperature):
    """The first two tokens of seeded draws, against llama.cpp's own distributions (a call of
    one position each: a verify of several rows may differ from it by rounding only, far below
    what the test can see)."""
    from omnidraft.translate.state import PairState

    sampling = SamplingConfig(temperature=temperature)
    drafter = CausalLM(tiny("llama", vocab_len(smollm_tok), seed=11))
    lm = LlamaCppLM(gguf, n_ctx=256, threads=1)
    pair = PairState(smollm_tok, qwen_tok, drafter.vocab_size, VOCAB)
    prompt_ids = qwen_tok(PROMPT).input_ids
    ref = LlamaCppLM(gguf, n_ctx=256, threads=1)

    class Exact:
        """The exact distribution after the prompt (key: its last id) or after the prompt + x1."""

        def logits_after(self, prev: list[int]) -> torch.Tensor:
            return ref.sync(prompt_ids if self.first else prompt_ids + prev).logits

    draws = _draws_for(probs(ref.sync(prompt_ids).logits[0], sampling))
    positions = [defaultdict(list), defaultdict(list)]
    for seed in range(draws):
        target = LocalTarget(lm, SamplingConfig(temperature=temperature, seed=seed), mode)
        out = generate_speculative(drafter, target, pair, PROMPT, cfg=SpecConfig(strategy), k=FixedK(3),
                                   max_new_tokens=2).token_ids
        positions[0][prompt_ids[-1]].append(out[0])
        positions[1][out[0]].append(out[1])
    exact = Exact()
    for j, contexts in enumerate(positions):
        exact.first = j == 0
        pvalue, tv, n = _position_test(exact, sampling, contexts)
        print(f"{strategy} {mode} T={temperature} position {j + 1}: p = {pvalue:.3g}, detects TV {tv:.3f} over {n}")
        assert pvalue > ALPHA
