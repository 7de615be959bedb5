"""The ExecuTorch drafter (export/ + device/): the fp32 program matches eager PEFT with two
different adapters swapped in as .ptd files without re-exporting, the speculative loop on it
keeps the target's greedy output, and bad inputs get clear errors."""

import copy
import dataclasses
import shutil

import pytest
import torch

from omnidraft.errors import OmniDraftError
from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.decode.modes import default_verify_mode
from omnidraft.decode.target import LocalTarget
from omnidraft.propose.config import SpecConfig
from omnidraft.sampling import SamplingConfig

from ..conftest import once_per_run, tiny, vocab_len

pytest.importorskip("executorch")


def _adapter_version(peft_model, head, root, name: str, seed: int):
    """Publish a random (non-zero B) LoRA adapter + head, as training would, and return its dir."""
    from omnidraft.adapters import AdapterStore

    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_" in n:
                p.normal_(0, 0.05)
        for p in head.parameters():
            p.normal_(0, 0.1)
    store = AdapterStore(root)
    v = store.publish(name, peft_model, extra={"head": head.state_dict()})
    return store.path(name, v)


def _programs(base, folder):
    """The fp32 drafter program (its attention inside XNNPACK, a one-token method over the first 64
    slots), and the same with the adapter ops left to the portable kernels (its .ptd keyed by name
    only), in ``folder``; the first's ProgramInfo."""
    from omnidraft.export.lower import ExportConfig, export_drafter

    cfg = ExportConfig(drafter="tiny", quant="fp32", max_seq=96, lora_rank=8, lora_alpha=16, head_width=32,
                       decode_window=64)  # one-token calls below position 64 take the "decode" method
    info = export_drafter(copy.deepcopy(base), folder / "prog", cfg, log=lambda s: None)
    assert info.decode_window == 64
    export_drafter(copy.deepcopy(base), folder / "prog-portable", dataclasses.replace(cfg, delegate_adapter=False),
                   log=lambda s: None)
    return info


@pytest.fixture(scope="module")
def exported(smollm_tok, tmp_path_factory):
    """One tiny SmolLM2-vocabulary drafter (one layer) exported fp32 once per test run
    (conftest.once_per_run), and two trained-looking adapters published in this module's store."""
    from omnidraft.models.acceptance import AcceptanceHead
    from omnidraft.train.trainer import TrainConfig, attach_lora

    base = tiny("llama", vocab_len(smollm_tok), seed=1, num_hidden_layers=1)
    programs, info = once_per_run(tmp_path_factory, "drafter-fp32", lambda folder: _programs(base, folder))
    root = tmp_path_factory.mktemp("et")
    for prog in ("prog", "prog-portable"):
        (root / prog).symlink_to(programs / prog, target_is_directory=True)
    versions = []
    for seed in (1, 2):  # trained with alpha 8 (not the program's 16): B is rescaled in the .ptd
        pm = attach_lora(copy.deepcopy(base), TrainConfig(rank=8, alpha=8))
        versions.append((pm.eval(), AcceptanceHead(base.config.hidden_size, 32, 6.0).eval()))
        _adapter_version(*versions[-1], root / "store", "tiny--t", seed)
    return base, root, info, versions


def _ptd(root, info, version: str, prog: str = "prog"):
    from omnidraft.export.adapter_data import export_adapter

    return export_adapter(root / "store" / "tiny--t" / version, info, root / f"{prog}-{version}.ptd")


def test_adapter_matmuls_run_inside_xnnpack(exported):
    """By default every LoRA weight is read by XNNPACK through its content key in the .ptd."""
    _, root, info, _ = exported
    lora = [n for n in info.adapter_keys if ".lora_" in n]
    assert lora and all(info.ptd_keys[n] != [n] for n in lora)


@pytest.mark.parametrize("prog", ["prog", "prog-portable"])
def test_program_matches_eager_with_swapped_adapters(exported, prog):
    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.export.info import ProgramInfo

    base, root, _, versions = exported
    lm = ExecuTorchLM(root / prog)
    info = ProgramInfo.load(root / prog / "program.json")
    ids = [int(x) for x in torch.randint(0, 40000, (12,), generator=torch.Generator().manual_seed(0))]
    for i, (pm, head) in enumerate([(None, None), *versions]):
        if pm is not None:
            lm.load_adapter(_ptd(root, info, f"v000{i}", prog))
        ref_model = base if pm is None else pm
        with torch.no_grad():
            ref = ref_model(torch.tensor([ids])).logits[0]  # [12, V]
            hid = (ref_model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0, -1])
        out = lm.prefill(ids[:9], hidden=True)  # prefill, then decode one by one
        assert (out.logits[0] - ref[8]).abs().max() <= 1e-4
        for j in range(9, 12):
            out = lm.extend([ids[j]], hidden=True)
            assert (out.logits[0] - ref[j]).abs().max() <= 1e-4
        if head is not None:  # the program's head score of its greedy token
            emb = ref_model.get_input_embeddings().weight[int(ref[-1].argmax())]
            assert abs(float(out.accept[0]) - head.accept_prob(hid, emb)) <= 1e-4
        lm.rollback(5)  # rollback = move the write position; outputs match again
        out = lm.extend([ids[7]])
        assert (out.logits[0] - ref[7]).abs().max() <= 1e-4
        # greedy continuation: the same tokens as eager
        seq, ref_seq = list(ids), list(ids)
        for _ in range(6):
            seq.append(int(lm.sync(seq).logits[0].argmax()))
            with torch.no_grad():
                ref_seq.append(int(ref_model(torch.tensor([ref_seq])).logits[0, -1].argmax()))
        assert seq == ref_seq


def test_adapters_change_outputs(exported):
    from omnidraft.device.runtime import ExecuTorchLM

    _, root, info, _ = exported
    lm = ExecuTorchLM(root / "prog")
    outs = []
    for ptd in (root / "prog" / "base.ptd", _ptd(root, info, "v0001"), _ptd(root, info, "v0002"),
                root / "prog" / "base.ptd"):
        lm.load_adapter(ptd)
        outs.append(lm.prefill([5, 6, 7, 8]).logits[0])
    assert (outs[0] - outs[1]).abs().max() > 1e-3 and (outs[1] - outs[2]).abs().max() > 1e-3
    assert torch.equal(outs[0], outs[3])  # back to the base adapter: the same logits exactly
    # two programs alive at once with different adapters under the same content keys: each
    # keeps its own weights (XNNPACK must not share packed weights between them)
    other = ExecuTorchLM(root / "prog", ptd=_ptd(root, info, "v0002"))
    lm.load_adapter(_ptd(root, info, "v0001"))
    assert torch.equal(lm.prefill([5, 6, 7, 8]).logits[0], outs[1])
    assert torch.equal(other.prefill([5, 6, 7, 8]).logits[0], outs[2])


def test_loads_of_one_adapter_share_packed_weights_and_another_version_packs_its_own(exported):
    """Twins and a slots' swap share one packed copy of a version (XNNPACK's weight cache); a load
    of another version beside them packs its own; each computes its own adapter's logits."""
    from pathlib import Path

    from omnidraft.device import weight_sharing
    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.models.slots import Slots

    _, root, info, _ = exported
    v1, v2 = _ptd(root, info, "v0001"), _ptd(root, info, "v0002")

    def logits(lm):
        lm.reset()
        return lm.prefill([5, 6, 7, 8]).logits[0]

    def cached(ptd) -> int:  # loads alive sharing the cache with ``ptd``'s weights
        return sum(n for (_keys, version), n in weight_sharing._held.items() if version[0] == str(Path(ptd).resolve()))

    want = {v: logits(ExecuTorchLM(root / "prog", ptd=v)) for v in (v1, v2)}
    assert cached(v1) == cached(v2) == 0  # freed with their programs
    slots = Slots(ExecuTorchLM(root / "prog", ptd=v1), 2)
    assert slots.distinct == 2 and cached(v1) == 2
    other = ExecuTorchLM(root / "prog", ptd=v2)
    assert cached(v2) == 0 and torch.equal(logits(other), want[v2])  # packed its own beside v1's
    slots.load_adapter(v2)  # every slot released before any loads: v2 shared by both
    assert cached(v1) == 0 and cached(v2) == 2
    for i in range(2):
        slots.use(i)
        assert torch.equal(logits(slots), want[v2])
    assert torch.equal(logits(other), want[v2])
    with pytest.raises(OmniDraftError, match="adapter file not found"):
        slots.load_adapter(root / "missing.ptd")  # every slot released first: each runs v2 again
    for i in range(2):
        slots.use(i)
        assert torch.equal(logits(slots), want[v2])


def test_an_adapter_swap_holds_one_program_and_a_failed_one_keeps_the_running_adapter(exported, monkeypatch):
    import weakref

    from executorch.runtime import Runtime

    from omnidraft.device.runtime import ExecuTorchLM

    _, root, info, _ = exported
    v1, v2 = _ptd(root, info, "v0001"), _ptd(root, info, "v0002")
    lm = ExecuTorchLM(root / "prog", ptd=v1)
    before = lm.prefill([5, 6, 7, 8]).logits[0]
    running, real, released = weakref.ref(lm.program), Runtime.load_program, []

    def load(self, path, *, data_path=None, **kw):
        released.append(running() is None)  # the running program was freed before this load
        if data_path == str(v2):
            raise RuntimeError("Failed to load method forward")
        return real(self, path, data_path=data_path, **kw)

    monkeypatch.setattr(Runtime, "load_program", load)
    with pytest.raises(OmniDraftError, match="could not load"):
        lm.load_adapter(v2)
    assert released == [True, True]  # v0002 failed, then v0001 was loaded again
    assert lm.ptd == v1 and lm.length == 0
    assert torch.equal(lm.prefill([5, 6, 7, 8]).logits[0], before)


def test_speculative_on_program_equals_target(exported, cross):
    from omnidraft.device.runtime import ExecuTorchLM

    base, root, _, _ = exported
    d, t, pair = cross
    assert d.vocab_size == base.config.vocab_size
    eager = ExecuTorchLM(root / "prog")
    for prompt in ("def fibonacci(n):\n", "The Eiffel Tower is in"):
        ref = generate_ar(LocalTarget(t), pair.target_tok, prompt, max_new_tokens=20)
        for cfg, k in ((SpecConfig("omnidraft"), 4), (SpecConfig("tli"), 3),
                       (SpecConfig("omnidraft", gamma=0.5), 8)):
            target = LocalTarget(t, SamplingConfig(), default_verify_mode(cfg.strategy))
            out = generate_speculative(eager, target, pair, prompt, cfg=cfg, k=FixedK(k), max_new_tokens=20)
            assert out.token_ids == ref.token_ids, (prompt, cfg, k)


def test_clear_errors(exported, tmp_path):
    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.export.adapter_data import write_ptd
    from omnidraft.export.lower import ExportConfig

    _, root, info, _ = exported
    lm = ExecuTorchLM(root / "prog")
    with pytest.raises(OmniDraftError, match="exceed the program's cache of 96"):
        lm.prefill(list(range(1, 98)))  # a prompt longer than the exported maximum
    lm.prefill(list(range(1, 90)))
    with pytest.raises(OmniDraftError, match="exceed the program's cache"):
        for t in range(10):  # decoding past the cache
            lm.extend([t + 1])
    other = tmp_path / "other.ptd"
    write_ptd({"lm.model.layers.0.self_attn.q_proj.lora_A.default.weight": torch.zeros(4, 32)}, set(), other)
    with pytest.raises(OmniDraftError, match="made for another program"):
        lm.load_adapter(other)
    (tmp_path / "junk.ptd").write_bytes(b"not a ptd at all" * 4)
    with pytest.raises(OmniDraftError, match="not a readable .ptd"):
        lm.load_adapter(tmp_path / "junk.ptd")
    with pytest.raises(OmniDraftError, match="no ExecuTorch program"):
        ExecuTorchLM(tmp_path)
    with pytest.raises(OmniDraftError, match="ExportConfig.quant"):
        ExportConfig(drafter="x", quant="int3")
    with pytest.raises(OmniDraftError, match="greedy token only"):
        from omnidraft.propose.drafter import Drafter

        Drafter(lm, SamplingConfig(temperature=0.8), None).stop_rule(SpecConfig("omnidraft", gamma=0.5))


def test_session_on_program_picks_up_published_adapters(exported, qwen_tok, smollm_tok, tmp_path, monkeypatch):
    from omnidraft import Session
    from omnidraft.export.layout import program_dir
    from omnidraft.models.eager import CausalLM
    from omnidraft.pairs.settings import Runtime

    from ..conftest import save_tiny

    base, root, info, versions = exported
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    drafter = str(save_tiny(base, smollm_tok, tmp_path / "drafter"))
    target = str(save_tiny(tiny("qwen2", vocab_len(qwen_tok), seed=2), qwen_tok, tmp_path / "target"))
    shutil.copytree(root / "prog", program_dir(drafter, "fp32", 96))
    s = Session(drafter, target, spec=SpecConfig("omnidraft", gamma=0.5),
                runtime=Runtime(drafter="executorch", quant="fp32", max_seq=96, dtype="fp32"))
    t = CausalLM(s.target_model.model)
    prompt = "def add(a, b):\n"
    ref = generate_ar(LocalTarget(t), qwen_tok, prompt, max_new_tokens=16)
    assert s.generate(prompt, max_new_tokens=16).token_ids == ref.token_ids and s.version is None
    before = s.drafter.prefill([1, 2, 3]).logits.clone()
    v1 = _adapter_version(*versions[0], tmp_path / "home" / "adapters", s.spec.name, seed=1)
    res = s.generate(prompt, max_new_tokens=16)  # refresh: the new version's .ptd, written now
    assert s.version == v1.name and res.token_ids == ref.token_ids and s.has_head
    assert s.drafter.ptd.is_file() and s.drafter.ptd.parent.name == info.program_id
    assert (s.drafter.prefill([1, 2, 3]).logits - before).abs().max() > 1e-3


def test_specvocab_program_matches_eager_specvocab(smollm_tok, tmp_path):
    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.export.lower import ExportConfig, export_drafter
    from omnidraft.models.specvocab import SpecVocabHead, SpecVocabLM

    base = tiny("llama", vocab_len(smollm_tok), seed=3, num_hidden_layers=1)
    ranker = SpecVocabHead(base.get_output_embeddings().weight)
    with torch.no_grad():  # a ranker unlike its SVD initialisation, as after training
        ranker.down.add_(torch.randn_like(ranker.down) * 0.05)
    eager = SpecVocabLM(copy.deepcopy(base), k=256)
    eager.ranker.load_state_dict(ranker.state_dict())
    cfg = ExportConfig(drafter="tiny-sv", quant="fp32", max_seq=32, lora_rank=4, lora_alpha=4,
                       head_width=16, specvocab_k=256)
    export_drafter(copy.deepcopy(base), tmp_path / "sv", cfg, log=lambda s: None, ranker=ranker)
    lm = ExecuTorchLM(tmp_path / "sv")
    ids = [5, 17, 300, 4000, 9]
    out = lm.prefill(ids).logits[0]  # [V]
    with torch.no_grad():
        ref = eager(input_ids=torch.tensor([ids])).logits[0, -1]
    assert torch.equal(torch.isinf(out), torch.isinf(ref)) and int((~torch.isinf(out)).sum()) == 256
    keep = ~torch.isinf(ref)
    assert (out[keep] - ref[keep]).abs().max() <= 1e-4


def test_trimmed_head_program_keeps_the_first_ids_logits(smollm_tok, tmp_path):
    """A drafter exported with ``head_tokens`` returns the model's own logits for the first
    head_tokens ids and -inf for every other, at prefill and in its one-token method; a target or
    SpecVocab with it is refused by name."""
    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.export.lower import ExportConfig, export_drafter

    base = tiny("llama", vocab_len(smollm_tok), seed=4, num_hidden_layers=1)
    cfg = ExportConfig(drafter="tiny-h", quant="fp32", max_seq=96, lora_rank=4, lora_alpha=4, head_width=16,
                       head_tokens=1000, decode_window=64)
    export_drafter(copy.deepcopy(base), tmp_path / "h", cfg, log=lambda s: None)
    lm = ExecuTorchLM(tmp_path / "h")
    ids = [5, 17, 300, 4000, 9, 999, 1200]
    out = [lm.prefill(ids[:4]).logits[0]] + [lm.extend([t]).logits[0] for t in ids[4:]]  # [V] each
    with torch.no_grad():
        ref = base(input_ids=torch.tensor([ids])).logits[0, 3:]  # [4, V]
    for got, want in zip(out, ref):
        assert got.shape == want.shape and torch.isinf(got[1000:]).all() and not torch.isinf(got[:1000]).any()
        assert (got[:1000] - want[:1000]).abs().max() <= 1e-4
    for bad in ({"role": "target"}, {"specvocab_k": 256}, {"head_tokens": -1}):
        with pytest.raises(OmniDraftError, match="head_tokens"):
            dataclasses.replace(cfg, **{"head_tokens": 1000, **bad})


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_program_layers_equal_hugging_face(arch):
    """The program's XNNPACK-shaped layer loop (llama, qwen2) or the Hugging Face layers on the
    custom ops (others) give the model's own logits, at prefill and at each decode step."""
    from omnidraft.models.acceptance import AcceptanceHead
    from omnidraft.export.program import DraftProgram

    lm = tiny(arch, 300, seed=3, **({"sliding_window": 32} if arch == "gemma3" else {}))
    ids = torch.randint(0, 300, (1, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = lm(ids).logits[0]  # [10, V]
        prog = DraftProgram(copy.deepcopy(lm), AcceptanceHead(lm.config.hidden_size, 16), max_seq=32)
        assert (prog.rot is not None) == (arch != "gemma3")
        out = [prog(ids[:, :7], torch.tensor([0]))[0][0]]
        out += [prog(ids[:, j:j + 1], torch.tensor([j]))[0][0] for j in range(7, 10)]
    assert (torch.stack(out) - ref[6:]).abs().max() <= 1e-4
    if arch == "gemma3":  # a window shorter than the cache: refused, not silently wrong
        with pytest.raises(OmniDraftError, match="sliding-window"):
            DraftProgram(tiny(arch, 300, sliding_window=8), AcceptanceHead(lm.config.hidden_size, 16), max_seq=32)


def test_publish_writes_the_ptd_of_every_program_of_the_drafter(exported, tmp_path, monkeypatch):
    import json

    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.export.layout import pair_ptd, program_dir, publish_ptds

    _base, root, info, _versions = exported
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    shutil.copytree(root / "prog", program_dir("tiny", "fp32", 96))
    shutil.copytree(root / "prog-portable", program_dir("tiny", "fp32", 128))
    version = sorted((root / "store" / "tiny--t").glob("v*"))[0]
    written = publish_ptds("tiny--t", "tiny", version)
    assert len(written) == 2 and written[0] != written[1]
    assert pair_ptd("tiny--t", version.name, info) in written
    lm = ExecuTorchLM(program_dir("tiny", "fp32", 96), ptd=pair_ptd("tiny--t", version.name, info))
    assert lm.prefill([1, 2, 3]).logits.shape[-1] == info.vocab_size
    # a program the adapter does not fit (another rank): one clear error, the others still written
    odd = program_dir("tiny", "fp32", 64)
    shutil.copytree(root / "prog", odd)
    meta = json.loads((odd / "program.json").read_text())
    meta["config"]["lora_rank"], meta["program_id"] = 4, "0" * 16
    (odd / "program.json").write_text(json.dumps(meta))
    for p in written:
        p.unlink()
    with pytest.raises(OmniDraftError, match="rank 8 does not fit"):
        publish_ptds("tiny--t", "tiny", version)
    assert all(p.is_file() for p in written)
