import pytest

from .same_bytes import ship


@pytest.fixture(scope="session")
def shipped(tmp_path_factory):
    """role -> the shipped tiny program (same_bytes.py), exported on first use, once per session."""
    done = {}

    def get(role: str):
        if role not in done:
            done[role] = ship(role, tmp_path_factory.mktemp(f"shipped-{role}"))
        return done[role]

    return get
