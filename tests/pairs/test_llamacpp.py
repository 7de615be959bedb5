"""The target alone on llama.cpp: llama-cpp-python's greedy generation counted as the target
alone counts it, on the packaged GGUF and the process's threads, streamed as text; a one-line
error without the extra or a GGUF. llama-cpp-python is an optional extra, so a stand-in module
plays it here (the integration tier and the benchmarks run the real one)."""

import sys
import types

import pytest
import torch

from omnidraft.decode.text import drained
from omnidraft.errors import OmniDraftError
from omnidraft.models import catalog
from omnidraft.pairs import llamacpp as la

EOS = 99


class FakeLlama:
    """What LlamaCppAlone uses of llama_cpp.Llama: greedy generation yielding a scripted stream,
    and a vocabulary of 100 ids whose one end-of-generation id is EOS."""

    made: list = []
    script: list = [5, 6, 7, 8, 9]
    _model = types.SimpleNamespace(model=None)

    def __init__(self, **kw):
        self.kw = kw
        self.prompts = []
        FakeLlama.made.append(self)

    def n_vocab(self):
        return 100

    def generate(self, ids, **kw):
        assert kw["top_k"] == 1 and kw["temp"] == 0.0 and kw["repeat_penalty"] == 1.0  # greedy, nothing added
        self.prompts.append(list(ids))
        yield from self.script


@pytest.fixture()
def fake_llama_cpp(monkeypatch):
    FakeLlama.made, FakeLlama.script = [], [5, 6, 7, 8, 9]
    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(
        Llama=FakeLlama, llama_model_get_vocab=lambda model: None, llama_vocab_is_eog=lambda vocab, i: i == EOS))
    return FakeLlama


def test_a_stop_token_is_counted_and_the_budget_ends_generation(fake_llama_cpp, tmp_path, qwen_tok):
    run = la.LlamaCppAlone(tmp_path / "m.gguf", threads=3, stop={7}, tok=qwen_tok)
    assert run([1, 2], 10)[0] == 3  # 5 6 7: the stop token counts, as the target alone counts it
    assert run([1, 2], 2)[0] == 2
    fake_llama_cpp.script = [5, EOS, 6]
    assert run([1], 10)[0] == 2  # the GGUF's own EOS stops it too
    kw = fake_llama_cpp.made[0].kw
    assert kw["n_threads"] == kw["n_threads_batch"] == 3 and kw["verbose"] is False
    assert fake_llama_cpp.made[0].prompts == [[1, 2], [1, 2], [1]]


def test_the_stream_is_the_generated_ids_text(fake_llama_cpp, tmp_path, qwen_tok):
    ids = qwen_tok("def add(a, b):\n    return a + b  # é€", add_special_tokens=False).input_ids
    fake_llama_cpp.script = ids
    run = la.LlamaCppAlone(tmp_path / "m.gguf", threads=1, stop=set(), tok=qwen_tok)
    pieces = []
    alone = drained(run.stream_alone([1], 100), pieces.append)
    assert "".join(pieces) == alone.text == qwen_tok.decode(ids) and alone.tokens == len(ids)
    with pytest.raises(OmniDraftError, match="exceed its context of 2048"):
        drained(run.stream_alone([1] * 2000, 100))


def test_a_catalog_target_runs_its_packaged_gguf_on_the_process_threads(fake_llama_cpp, monkeypatch, tmp_path):
    gguf = tmp_path / "qwen.gguf"
    monkeypatch.setattr(catalog, "ensure_gguf", lambda name, progress: gguf if name == "qwen2.5-coder-0.5b" else None)
    run = la.llamacpp_engine("qwen2.5-coder-0.5b", {1}, None, progress=pytest.fail)
    assert run.gguf == gguf and run.llm.kw["model_path"] == str(gguf)
    assert run.llm.kw["n_threads"] == torch.get_num_threads()
    local = la.llamacpp_engine(str(tmp_path / "other.gguf"), {1}, None, progress=pytest.fail)
    assert local.gguf == tmp_path / "other.gguf"


def test_without_a_gguf_or_llama_cpp_python_one_line_says_why(fake_llama_cpp, monkeypatch, tmp_path):
    with pytest.raises(OmniDraftError, match=f"{tmp_path} has no GGUF to run"):
        la.llamacpp_engine(str(tmp_path), {1}, None, progress=pytest.fail)
    assert not fake_llama_cpp.made
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    with pytest.raises(OmniDraftError) as err:
        la.llamacpp_engine("qwen2.5-coder-0.5b", {1}, None, progress=pytest.fail)
    assert "not installed" in str(err.value) and "pip install -e '.[llamacpp]'" in str(err.value)
    assert "\n" not in str(err.value)
