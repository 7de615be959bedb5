import pytest

from ..conftest import vocab_len
from .same_bytes import shipped as shipped_program


@pytest.fixture(scope="session")
def shipped(tmp_path_factory, qwen_tok):
    """The shipped tiny target program's Shipped (same_bytes.py), exported once per test run
    (conftest.once_per_run)."""
    return shipped_program(tmp_path_factory, vocab_len(qwen_tok))[1]
