"""Training records, online distillation steps, and the per-pair adapter store."""

import copy

import pytest
import torch

from omnidraft.adapters import AdapterStore
from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_speculative
from omnidraft.decode.target import LocalTarget
from omnidraft.train.records import Record, build_record
from omnidraft.propose.config import SpecConfig
from omnidraft.train.trainer import OnlineTrainer, TrainConfig, attach_lora

from ..conftest import recorded_pair, vocab_len

PROMPTS = ["def add(a, b):\n", "The weather today is", "Liste des courses: ", "x = [1, 2, 3]\n"]


@pytest.fixture(scope="module")
def setup(smollm_tok, qwen_tok):
    return recorded_pair(smollm_tok, qwen_tok, PROMPTS)


def test_records_cover_the_response_and_round_trip(setup, smollm_tok):
    _, _, pair, records = setup
    for rec in records:
        gen = range(rec.gen_start, rec.length)
        covered = sum(1 for i in gen if rec.kl_row[i] >= 0 or rec.ngram_p[i] > 0)
        assert covered >= 0.8 * len(gen)  # every token of the response contributes
        assert (rec.row_ids < vocab_len(smollm_tok)).all()
        back = Record.from_bytes(rec.to_bytes())
        for k, v in rec.__dict__.items():
            assert torch.equal(v, getattr(back, k)) if isinstance(v, torch.Tensor) else v == getattr(back, k)
    assert sum(int(r.ngram_mask.sum()) for r in records) > 0  # n-gram segments were recorded
    with pytest.raises(ValueError, match="not an OmniDraft training record"):
        Record.from_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"__metadata__\":{}}")


def test_record_of_256_tokens_is_under_100kb(setup):
    d, t, pair, _ = setup
    rec = build_record(pair.vmap, generate_speculative(d, LocalTarget(t), pair, "Once upon a time",
                                                       cfg=SpecConfig("omnidraft"), k=FixedK(4), max_new_tokens=256,
                                                       record_topk=64).verified)
    size = len(rec.to_bytes())
    print(f"record: {rec.length} drafter tokens, {size} bytes")
    assert rec.length >= 200 and size < 100_000


@pytest.mark.parametrize("method,loss", [("lora", "dm+ngram"), ("lora", "dm+approx"), ("full", "dm"),
                                         ("lora", "dm")])
def test_one_update_lowers_the_loss_on_its_batch(setup, method, loss):
    d, _, _, records = setup
    model = copy.deepcopy(d.model)
    cfg = TrainConfig(method=method, loss=loss, update_interval=len(records), lr=1e-3 if method == "lora" else 1e-4)
    if method == "lora":
        model = attach_lora(model, cfg)
    trainer = OnlineTrainer(model, cfg)
    with torch.no_grad():
        before, parts = trainer.loss(records)
    assert parts["positions"] > 20 and torch.isfinite(before)
    info = trainer.add(records[0]) + trainer.add(records[1]) + trainer.add(records[2]) + trainer.add(records[3])
    assert len(info) == 1 and trainer.steps == 1 and not trainer.buffer
    with torch.no_grad():
        after, _ = trainer.loss(records)
    assert after < before


def test_bad_train_config_names_the_option():
    from omnidraft.errors import OmniDraftError

    with pytest.raises(OmniDraftError, match="TrainConfig.loss"):
        TrainConfig(loss="mse")
    with pytest.raises(OmniDraftError, match="TrainConfig.ngram_lambda"):
        TrainConfig(ngram_lambda=-1)


def test_adapter_store_round_trip_and_switching(setup, tmp_path):
    d, _, _, records = setup
    ids = torch.tensor([records[0].draft_ids[:30].long().tolist()])
    model = attach_lora(copy.deepcopy(d.model), TrainConfig())
    trainer = OnlineTrainer(model, TrainConfig(lr=1e-2, update_interval=1))
    store = AdapterStore(tmp_path)
    base_logits = model(ids).logits  # LoRA B starts at zero: equals the base
    trainer.add(records[0])
    a_logits = model(ids).logits
    va = store.publish("smollm2-135m__qwen2.5-coder-0.5b", model, {"note": "A"})
    trainer.add(records[1])
    b_logits = model(ids).logits
    vb = store.publish("smollm2-135m__qwen2.5-coder-0.5b", model, {"note": "B"})
    assert (va, vb) == ("v0001", "v0002")
    assert [x["note"] for x in store.list("smollm2-135m__qwen2.5-coder-0.5b")] == ["A", "B"]
    assert not (a_logits - b_logits).abs().max() < 1e-6

    # a fresh process: base model + stored adapters, switching without reloading the base
    fresh = attach_lora(copy.deepcopy(d.model), TrainConfig())
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, base_logits)
        store.load(fresh, "smollm2-135m__qwen2.5-coder-0.5b", "v0001")
        assert torch.equal(fresh(ids).logits, a_logits)
        store.load(fresh, "smollm2-135m__qwen2.5-coder-0.5b", "v0002")
        assert torch.equal(fresh(ids).logits, b_logits)
        store.load(fresh, "smollm2-135m__qwen2.5-coder-0.5b", "v0001")
        assert torch.equal(fresh(ids).logits, a_logits)
        fresh.set_adapter("default")
        assert torch.equal(fresh(ids).logits, base_logits)
    store.delete("smollm2-135m__qwen2.5-coder-0.5b", "v0001")
    assert store.versions("smollm2-135m__qwen2.5-coder-0.5b") == ["v0002"]
    assert not list(tmp_path.glob("*/.tmp-*"))


@pytest.mark.parametrize("loss", ["dm+ngram", "dm+approx"])
def test_a_step_taken_in_pieces_of_records_is_the_whole_batchs_step(setup, monkeypatch, loss):
    """A step sums its gradient over pieces of MICRO records (only a piece's activations held at a
    time): the same gradient and loss as the whole batch at once, to float rounding; ``between``
    (the daemon's wait while anything generates) runs between pieces."""
    from omnidraft.train import trainer

    d, _, _, records = setup
    got = {}
    for micro in (len(records), 1):
        monkeypatch.setattr(trainer, "MICRO", micro)
        torch.manual_seed(0)
        cfg = TrainConfig(loss=loss, lr=1e-3)
        model = attach_lora(copy.deepcopy(d.model), cfg)
        waits = []
        info = OnlineTrainer(model, cfg, between=lambda: waits.append(1)).step(records)
        assert len(waits) == len(records) // micro - 1
        got[micro] = info, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    (whole, g_whole), (pieces, g_pieces) = got[len(records)], got[1]
    assert whole["positions"] == pieces["positions"] > 20 and whole["loss"] == pytest.approx(pieces["loss"], rel=1e-5)
    assert g_whole.keys() == g_pieces.keys() and any(g.abs().max() > 0 for g in g_whole.values())
    for name, g in g_whole.items():
        assert torch.allclose(g, g_pieces[name], rtol=1e-4, atol=1e-7), name
