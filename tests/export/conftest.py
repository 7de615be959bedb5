import os
import pickle

import pytest
from filelock import FileLock

from .same_bytes import ship


@pytest.fixture(scope="session")
def shipped(tmp_path_factory):
    """role -> the shipped tiny program (same_bytes.py), exported on first use, once per test
    run: pytest-xdist's workers share it through their common temporary folder."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # this run's folder, which every worker's own folder is in
    done = {}

    def get(role: str):
        if role not in done:
            kept = root / f"shipped-{role}.pickle"
            with FileLock(str(kept) + ".lock"):
                if not kept.is_file():
                    kept.write_bytes(pickle.dumps(ship(role, tmp_path_factory.mktemp(f"shipped-{role}"))))
                done[role] = pickle.loads(kept.read_bytes())
        return done[role]

    return get
