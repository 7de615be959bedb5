"""Saved conversation states (device/saved_states.py): the bundle sharing the longest prefix is
found (also by a conversation sharing only its start), RAM and disk stay within their bytes, a
restart finds what was written, and a truncated, corrupt or other weights' file is skipped with one
log line, never used and never a crash."""

import logging

import pytest
import torch

from omnidraft.device.kv_state import KVState
from omnidraft.device.saved_states import SUFFIX, SavedStates

W = {"target": "prog:base.ptd"}


def _bundle(key: list[int], weights: dict = W, layers: int = 2) -> dict[str, KVState]:
    g = torch.Generator().manual_seed(sum(key) + len(key))
    n = len(key)
    return {name: KVState(w, tuple(key), tuple(torch.randn(2, 4, n, generator=g) for _ in range(layers)),
                          tuple(torch.randn(2, n, 4, generator=g) for _ in range(layers)))
            for name, w in weights.items()}


def _same(a: dict[str, KVState], b: dict[str, KVState]) -> bool:
    return a.keys() == b.keys() and all(
        a[n].ids == b[n].ids and a[n].weights == b[n].weights
        and all(torch.equal(x, y) for x, y in zip((*a[n].keys, *a[n].values), (*b[n].keys, *b[n].values)))
        for n in a)


def test_the_longest_shared_prefix_wins_and_a_shared_start_is_found():
    store = SavedStates(ram_bytes=10**7)
    system, file = [1, 2, 3], [10, 11, 12, 13]
    a, b = system + file + [20, 21], system + [30, 31, 32]
    store.put(a, _bundle(a))
    store.put(b, _bundle(b))
    found = store.best(a + [22, 23], W)  # a follow-up of a
    assert found.shared == len(a) and _same(found.states, _bundle(a)) and found.where == "ram"
    found = store.best(system + file + [40], W)  # a new conversation on the same file
    assert found.shared == len(system + file) and found.states["target"].ids == tuple(a)
    assert store.best([99, 98], W) is None  # nothing shared
    assert store.best(a, {"target": "other:base.ptd"}) is None  # another program's states are never offered
    assert store.restored == {"ram": 2, "disk": 0}


def test_ram_holds_its_bound_least_recently_used_out_first():
    one = sum(s.nbytes for s in _bundle([1] * 50).values())
    store = SavedStates(ram_bytes=3 * one)
    keys = [[i] * 50 for i in range(1, 6)]
    for i, key in enumerate(keys):
        store.put(key, _bundle(key))
        if i == 2:
            assert store.best(keys[0], W).shared == 50  # the first used again: not the next to go
        assert store.ram_used <= 3 * one
    assert store.best(keys[0], W) is not None and store.best(keys[1], W) is None  # without a folder, gone


def test_disk_holds_its_bound_and_a_restart_finds_what_was_written(tmp_path):
    one = sum(s.nbytes for s in _bundle([1] * 50).values())
    store = SavedStates(ram_bytes=one, folder=tmp_path, disk_bytes=int(2.5 * one))
    keys = [[i] * 50 for i in range(1, 5)]
    for key in keys:
        store.put(key, _bundle(key))
        assert store.disk_used <= 2.5 * one
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 2
    again = SavedStates(ram_bytes=one, folder=tmp_path, disk_bytes=int(2.5 * one))  # a new process
    found = again.best(keys[-1] + [7], W)
    assert found.shared == 50 and _same(found.states, _bundle(keys[-1])) and found.where == "disk"
    assert again.restored == {"ram": 0, "disk": 1}
    assert again.best(keys[0], W) is None  # the oldest went to keep the bound


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_a_damaged_file_is_skipped_with_one_line(tmp_path, caplog, damage):
    key = [5, 6, 7, 8]
    SavedStates(ram_bytes=0, folder=tmp_path, disk_bytes=10**7).put(key, _bundle(key))
    (path,) = tmp_path.glob(f"*{SUFFIX}")
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2] if damage == "truncate" else
                     data[:-8] + bytes(b ^ 0xFF for b in data[-8:]) if damage == "flip" else b"not a state")
    with caplog.at_level(logging.WARNING, logger="omnidraft.states"):
        assert SavedStates(ram_bytes=0, folder=tmp_path, disk_bytes=10**7).best(key, W) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "skipped" in lines[0] and "\n" not in lines[0]


def test_its_own_file_as_written_is_read_unchecked_and_a_changed_one_checked(tmp_path, caplog, monkeypatch):
    import omnidraft.device.saved_states as saved_states

    checks, real = [], saved_states._digest
    monkeypatch.setattr(saved_states, "_digest", lambda t: (checks.append(1), real(t))[1])
    one, two = [5, 6, 7, 8], [9, 10, 11, 12]
    store = SavedStates(ram_bytes=0, folder=tmp_path, disk_bytes=10**7)  # every state on disk only
    store.put(one, _bundle(one))
    store.put(two, _bundle(two))
    written = len(checks)
    assert _same(store.best(one, W).states, _bundle(one)) and len(checks) == written  # as it wrote it: no checksum
    path = store._saved["local", tuple(two)].path
    data = path.read_bytes()
    path.write_bytes(data[:-8] + bytes(b ^ 0xFF for b in data[-8:]))  # changed since (its mtime too)
    with caplog.at_level(logging.WARNING, logger="omnidraft.states"):
        assert store.best(two, W) is None
    assert any("checksum" in r.getMessage() for r in caplog.records)


def test_a_bundle_larger_than_ram_is_kept_on_disk_only(tmp_path):
    key = [1] * 40
    store = SavedStates(ram_bytes=10, folder=tmp_path, disk_bytes=10**7)
    store.put(key, _bundle(key, {"target": "t", "drafter": "d"}))
    assert store.ram_used == 0
    found = store.best(key, {"target": "t", "drafter": "d"})
    assert found.shared == 40 and set(found.states) == {"target", "drafter"} and found.where == "disk"


def test_a_folder_that_cannot_hold_states_is_one_line_and_a_failed_write_keeps_ram(tmp_path, caplog, monkeypatch):
    from omnidraft.device import saved_states
    from omnidraft.errors import OmniDraftError

    (tmp_path / "file").write_text("x")
    with pytest.raises(OmniDraftError, match="cannot keep conversation states in"):
        SavedStates(10**7, tmp_path / "file", 10**7)

    def full(folder, saved, states):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(saved_states, "_write", full)
    store, key = SavedStates(10**7, tmp_path / "states", 10**7), [1] * 10
    with caplog.at_level(logging.WARNING, logger="omnidraft.states"):
        store.put(key, _bundle(key))
    assert [r.getMessage() for r in caplog.records] == [
        f"saved state not written to {tmp_path / 'states'}: No space left on device"]
    assert store.best(key, W).where == "ram"


def test_a_background_writer_writes_every_state_within_the_bounds_and_close_waits_for_it(tmp_path, monkeypatch):
    import threading

    import omnidraft.device.saved_states as saved_states

    one = sum(s.nbytes for s in _bundle([1] * 50).values())
    gate, real = threading.Event(), saved_states._write
    monkeypatch.setattr(saved_states, "_write", lambda *a: (gate.wait(10), real(*a))[1])  # a slow disk
    store = SavedStates(ram_bytes=one, folder=tmp_path, disk_bytes=int(2.5 * one), background=True)
    keys = [[i] * 50 for i in range(1, 5)]
    store.put(keys[0], _bundle(keys[0]))  # returns at once: the file waits for the disk
    assert not list(tmp_path.glob(f"*{SUFFIX}")) and store.best(keys[0], W).where == "ram"
    gate.set()
    for key in keys[1:]:
        store.put(key, _bundle(key))
    store.put(keys[-1], _bundle(keys[-1]))  # put again: one file for it
    store.close()
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 2 and store.disk_used <= 2.5 * one
    assert store.ram_used <= one
    again = SavedStates(ram_bytes=one, folder=tmp_path, disk_bytes=int(2.5 * one))  # a new process
    assert _same(again.best(keys[-1], W).states, _bundle(keys[-1])) and again.best(keys[2], W).where == "disk"
    assert again.best(keys[0], W) is None


def test_a_state_out_of_ram_before_its_file_is_written_is_found_on_disk(tmp_path, monkeypatch):
    import threading

    import omnidraft.device.saved_states as saved_states

    one = sum(s.nbytes for s in _bundle([1] * 50).values())
    gate, real = threading.Event(), saved_states._write
    monkeypatch.setattr(saved_states, "_write", lambda *a: (gate.wait(10), real(*a))[1])
    store = SavedStates(ram_bytes=one, folder=tmp_path, disk_bytes=10 * one, background=True)
    a, b = [1] * 50, [2] * 50
    store.put(a, _bundle(a))
    store.put(b, _bundle(b))  # a leaves RAM while its file still waits
    gate.set()
    store.flush()
    found = store.best(a, W)
    assert found.where == "disk" and _same(found.states, _bundle(a))
    store.close()


def test_a_bundle_restores_the_models_whose_weights_are_unchanged_or_not_loaded_yet():
    store = SavedStates(ram_bytes=10**7)
    key = [1] * 20
    store.put(key, _bundle(key, {"target": "t", "drafter": "adapter v2"}))
    found = store.best(key, {"target": "t", "drafter": "adapter v3"})  # a new adapter since: its drafter reads again
    assert set(found.states) == {"target"}
    assert store.best(key, {"target": "other", "drafter": "adapter v3"}) is None
    found = store.best(key, {"drafter": "adapter v3"}, loadable=frozenset({"target"}))  # the target not loaded yet
    assert set(found.states) == {"target"}
