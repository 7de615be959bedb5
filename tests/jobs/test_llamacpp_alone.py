"""The llama.cpp row: llama-cpp-python's generation counted as the target alone counts it, on
the packaged GGUF and the process's threads, and no row (one line saying why) without the extra
or a GGUF. llama-cpp-python is an optional extra, so a stand-in module plays it here."""

import sys
import types

import pytest
import torch

from omnidraft.jobs import llamacpp_alone as la
from omnidraft.models import catalog

EOS = 99


class FakeLlama:
    """What LlamaCppAlone uses of llama_cpp.Llama: greedy generation yielding a scripted stream."""

    made: list = []
    script: list = [5, 6, 7, 8, 9]

    def __init__(self, **kw):
        self.kw = kw
        self.prompts = []
        FakeLlama.made.append(self)

    def token_eos(self):
        return EOS

    def generate(self, ids, **kw):
        assert kw["top_k"] == 1 and kw["temp"] == 0.0 and kw["repeat_penalty"] == 1.0  # greedy, nothing added
        self.prompts.append(list(ids))
        yield from self.script


@pytest.fixture()
def fake_llama_cpp(monkeypatch):
    FakeLlama.made = []
    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=FakeLlama))
    return FakeLlama


def test_a_stop_token_is_counted_and_the_budget_ends_generation(fake_llama_cpp, tmp_path):
    run = la.LlamaCppAlone(tmp_path / "m.gguf", threads=3, stop={7})
    assert run([1, 2], 10)[0] == 3  # 5 6 7: the stop token counts, as the target alone counts it
    assert run([1, 2], 2)[0] == 2
    fake_llama_cpp.script = [5, EOS, 6]
    assert run([1], 10)[0] == 2  # the GGUF's own EOS stops it too
    kw = fake_llama_cpp.made[0].kw
    assert kw["n_threads"] == kw["n_threads_batch"] == 3 and kw["verbose"] is False
    assert fake_llama_cpp.made[0].prompts == [[1, 2], [1, 2], [1]]


def test_a_catalog_target_runs_its_packaged_gguf_on_the_process_threads(fake_llama_cpp, monkeypatch, tmp_path):
    gguf = tmp_path / "qwen.gguf"
    monkeypatch.setattr(catalog, "ensure_gguf", lambda name, progress: gguf if name == "qwen2.5-coder-0.5b" else None)
    run = la.llamacpp_alone("qwen2.5-coder-0.5b", {1}, say=pytest.fail)
    assert run.gguf == gguf and run.llm.kw["model_path"] == str(gguf)
    assert run.llm.kw["n_threads"] == torch.get_num_threads()
    local = la.llamacpp_alone(str(tmp_path / "other.gguf"), {1}, say=pytest.fail)
    assert local.gguf == tmp_path / "other.gguf"


def test_without_a_gguf_there_is_no_row_and_one_line_says_why(fake_llama_cpp, tmp_path):
    said = []
    assert la.llamacpp_alone(str(tmp_path), {1}, say=said.append) is None
    assert said == [f"llama.cpp: {tmp_path} has no GGUF, so no llama.cpp row"] and not fake_llama_cpp.made


def test_without_llama_cpp_python_there_is_no_row_and_one_line_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    said = []
    assert la.llamacpp_alone("qwen2.5-coder-0.5b", {1}, say=said.append) is None
    assert len(said) == 1 and "not installed" in said[0] and "pip install -e '.[llamacpp]'" in said[0]
