"""omnidraft/home.py: a scratch home reads this home's models and never shares its state."""

import pytest

from omnidraft.home import scratch_home


def test_scratch_home_links_the_real_homes_models(tmp_path, monkeypatch):
    real = tmp_path / "real"
    (real / "models").mkdir(parents=True)
    monkeypatch.setenv("OMNIDRAFT_HOME", str(real))
    root = scratch_home(tmp_path / "scratch")
    assert (root / "models").resolve() == (real / "models").resolve() and not (root / "programs").exists()
    with pytest.raises(FileExistsError):
        scratch_home(root)  # a run never reuses another's home
