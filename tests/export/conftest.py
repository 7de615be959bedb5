import pytest

from ..conftest import vocab_len
from .same_bytes import shipped as shipped_program


@pytest.fixture(scope="session")
def shipped(tmp_path_factory, qwen_tok):
    """role -> the shipped tiny program's Shipped (same_bytes.py), exported on first use, once per
    test run (conftest.once_per_run)."""
    return lambda role: shipped_program(tmp_path_factory, role, vocab_len(qwen_tok))[1]
