import pytest

from ..conftest import once_per_run
from .same_bytes import ship


@pytest.fixture(scope="session")
def shipped(tmp_path_factory):
    """role -> the shipped tiny program (same_bytes.py), exported on first use, once per test
    run (conftest.once_per_run)."""
    return lambda role: once_per_run(tmp_path_factory, f"shipped-{role}", lambda folder: ship(role, folder))[1]
