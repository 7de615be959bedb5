"""Pre-adapted adapters shipped with the package: written in bf16 with their pins, installed as a
pair's first version only when every pin matches, and a Session with no adapter starts from one."""

import copy

import pytest
import torch

from omnidraft.adapters import AdapterStore, shipped
from omnidraft.errors import OmniDraftError
from omnidraft.models.acceptance import AcceptanceHead
from omnidraft.train.trainer import TrainConfig, attach_lora

from ..conftest import save_tiny, tiny, vocab_len


def _published(store, pair: str, base):
    model = attach_lora(copy.deepcopy(base), TrainConfig(rank=4, alpha=4))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    head = AcceptanceHead(base.config.hidden_size, 16)
    return store.publish(pair, model, extra={"head": head.state_dict()}), model


def test_a_shipped_adapter_installs_in_bf16_only_with_its_pins(tmp_path, monkeypatch, smollm_tok):
    base = tiny("llama", vocab_len(smollm_tok), seed=3)
    store = AdapterStore(tmp_path / "store")
    version, model = _published(store, "a--b", base)
    pins = shipped.write(store.path("a--b", version), tmp_path / "ship" / "a--b", {"made_by": "test"})
    monkeypatch.setattr(shipped, "ROOT", tmp_path / "ship")
    monkeypatch.setattr(shipped, "PINS", {"a--b": pins})
    users = AdapterStore(tmp_path / "user")
    assert shipped.install(users, "x--y") is None  # none shipped for that pair
    assert shipped.install(users, "a--b") == "v0001"
    meta = users.list("a--b")[0]
    assert meta["pre_adapted"] and meta["made_by"] == "test" and meta["records_through"] == 0
    from safetensors.torch import load_file

    state = load_file(str(users.path("a--b") / "adapter_model.safetensors"))
    assert all(v.dtype == torch.bfloat16 for v in state.values())
    # it loads into the drafter as the weights it was made of, rounded to bf16
    loaded = copy.deepcopy(base)
    from peft import PeftModel

    loaded = PeftModel.from_pretrained(loaded, str(users.path("a--b")))
    want = {k: v for k, v in model.named_parameters() if "lora_B" in k}
    got = dict(loaded.named_parameters())
    for k, v in want.items():
        assert torch.allclose(got[k].float(), v.detach().bfloat16().float()), k
    (tmp_path / "ship" / "a--b" / "head.safetensors").write_bytes(b"tampered")
    with pytest.raises(OmniDraftError, match="not the pinned one"):
        shipped.install(users, "a--b")


def test_a_session_with_no_adapter_starts_from_the_shipped_one(tmp_path, monkeypatch, smollm_tok, qwen_tok):
    from omnidraft import Runtime, Session
    from omnidraft.pairs.spec import adapter_store, pair_name

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    base = tiny("llama", vocab_len(smollm_tok), seed=1)
    d = str(save_tiny(base, smollm_tok, tmp_path / "drafter"))
    t = str(save_tiny(tiny("qwen2", vocab_len(qwen_tok), seed=2), qwen_tok, tmp_path / "target"))
    name = pair_name(d, t)
    version, _ = _published(AdapterStore(tmp_path / "made"), name, base)
    pins = shipped.write(AdapterStore(tmp_path / "made").path(name, version), tmp_path / "ship" / name, {})
    monkeypatch.setattr(shipped, "ROOT", tmp_path / "ship")
    monkeypatch.setattr(shipped, "PINS", {name: pins})
    s = Session(d, t, runtime=Runtime(dtype="fp32"), log=False, k=2)
    assert s.version == "v0001" and adapter_store().list(name)[0]["pre_adapted"]
    assert s.generate("def add(a, b):\n", max_new_tokens=8).metrics["new_tokens"] > 0
    s.close()


def test_a_lower_rank_copy_installs_at_the_trained_rank_with_the_best_low_rank_change(tmp_path, monkeypatch, smollm_tok):
    import json

    from safetensors.torch import load_file

    base = tiny("llama", vocab_len(smollm_tok), seed=3)
    store = AdapterStore(tmp_path / "store")
    version, _model = _published(store, "a--b", base)
    made = store.path("a--b", version)
    pins = shipped.write(made, tmp_path / "ship" / "a--b", {}, rank=2)
    assert json.loads((tmp_path / "ship" / "a--b" / "adapter_config.json").read_text())["r"] == 2
    monkeypatch.setattr(shipped, "ROOT", tmp_path / "ship")
    monkeypatch.setattr(shipped, "PINS", {"a--b": pins})
    users = AdapterStore(tmp_path / "user")
    folder = users.path("a--b", shipped.install(users, "a--b"))
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["r"] == 4 and users.list("a--b")[0]["energy_kept"] <= 1.0  # the rank the programs take
    trained, installed = load_file(str(made / "adapter_model.safetensors")), load_file(str(folder / "adapter_model.safetensors"))
    for ka in (k for k in trained if "lora_A" in k):
        kb = ka.replace("lora_A", "lora_B")
        u, s, vh = torch.linalg.svd(trained[kb].float() @ trained[ka].float(), full_matrices=False)
        best = (u[:, :2] * s[:2]) @ vh[:2]  # the closest rank-2 change (scale alpha / r = 1 here)
        got = installed[kb].float() @ installed[ka].float() * config["lora_alpha"] / config["r"]
        assert torch.allclose(got, best, atol=0.02 * float(best.abs().max())), ka  # bf16 factors
