"""Quantising a model loaded from a mapped safetensors file (export/mapped.py): a layer at a time,
the file's pages of each replaced fp32 weight handed back, and the file let go at the end (no
tensor views the mapping), while the model computes exactly what the same model quantised in
memory of its own does."""

import gc

import torch
from transformers import AutoModelForCausalLM

from omnidraft.export.lower import quantize
from omnidraft.export.mapped import drop_file_pages, own_memory

from ..conftest import tiny


def _mapped(path) -> bool:
    return str(path) in open("/proc/self/maps").read()


def _load(folder):
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()


def test_a_model_quantised_from_its_mapped_file_lets_the_file_go_and_computes_the_same(tmp_path):
    tiny("llama", 300, seed=5, num_hidden_layers=3).save_pretrained(str(tmp_path / "m"))
    weights = tmp_path / "m" / "model.safetensors"
    lm = _load(tmp_path / "m")
    assert _mapped(weights)  # loaded by mapping, not reading: what made the 1.5B's export hold its file
    ref = _load(tmp_path / "m")
    own_memory(ref)  # the same weights in memory of their own: nothing there to hand back
    ids = torch.tensor([[1, 5, 9, 200, 7, 42]])
    quantize(lm, "8da8w", 32)
    quantize(ref, "8da8w", 32)
    gc.collect()
    assert not _mapped(weights)
    with torch.no_grad():
        assert torch.equal(lm(ids).logits, ref(ids).logits)


def test_only_whole_pages_of_a_mapped_file_are_dropped_and_read_again_unchanged(tmp_path):
    tiny("llama", 3000, seed=6).save_pretrained(str(tmp_path / "m"))
    lm = _load(tmp_path / "m")
    table = lm.get_input_embeddings().weight  # [3000, H] fp32 in the mapping: several pages
    before = table.detach().clone()
    assert drop_file_pages([table]) > 0
    assert torch.equal(table, before)  # read from the file again
    assert drop_file_pages([before]) == 0  # memory of its own is never touched
