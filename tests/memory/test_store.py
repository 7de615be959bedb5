"""The memory's store: bounded in bytes over all spaces (the least useful entries go first, the new
one never), spaces apart, a writer killed with SIGKILL leaves an intact file that kept every entry it
committed, and a damaged file or row is refused with one line or skipped."""

import signal
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from omnidraft.errors import OmniDraftError
from omnidraft.memory.config import MemoryConfig, entry_bytes
from omnidraft.memory.store import FILE, MemoryStore

MIB = 1 << 20


def test_the_byte_bound_holds_and_the_least_useful_go_first(tmp_path):
    cfg = MemoryConfig(max_bytes=MIB, low_water=0.75)
    store = MemoryStore(tmp_path, cfg)
    first = store.add("a", list(range(2000)))
    helped = store.add("b", list(range(2000)))
    epoch = store.epoch()
    for i in range(40):
        new = store.add("a" if i % 2 else "b", list(range(1000 + i)), helped={helped: 5} if i % 5 == 0 else None)
        assert store.charged() <= cfg.max_bytes  # never over, after any add
        assert new in {rid for rid, _ in store.entries("a" if i % 2 else "b")[0]}  # the new one stays
    kept = {rid for space in "ab" for rid, _ in store.entries(space)[0]}
    assert helped in kept and first not in kept  # credited kept, the oldest unused went
    assert store.epoch() > epoch  # evictions move the epoch on: other processes build their index again
    assert store.charged() == sum(entry_bytes(len(ids)) for space in "ab" for _, ids in store.entries(space)[0])


def test_spaces_see_only_their_own_entries_and_clear_apart(tmp_path):
    store = MemoryStore(tmp_path)
    a = store.add("a", [1, 2, 3], tally={"memory": (2, 8, 5)})
    store.add("b", [4, 5, 6])
    assert [rid for rid, _ in store.entries("a")[0]] == [a]
    assert [ids.tolist() for _, ids in store.entries("b")[0]] == [[4, 5, 6]]
    store.add("a", [], tally={"memory": (1, 4, 4)})  # a generation with nothing new to keep: its tally only
    stats = {s.space: s for s in store.stats()}
    assert stats["a"].entries == 1 and stats["a"].tally["memory"] == {"rounds": 3, "proposed": 12, "accepted": 9}
    assert store.clear("a") == 1 and store.entries("a")[0] == [] and len(store.entries("b")[0]) == 1
    assert [s.space for s in store.stats()] == ["b"]


WRITER = textwrap.dedent("""
    import sys
    from omnidraft.memory.config import MemoryConfig
    from omnidraft.memory.store import MemoryStore
    store = MemoryStore(sys.argv[1], MemoryConfig(max_bytes=1 << 20))
    i = 0
    while True:
        rid = store.add("a", [i % 5000] * (500 + i % 700), helped={max(1, i - 3): 2}, tally={"memory": (1, 4, 2)})
        print(rid, flush=True)
        i += 1
""")


@pytest.mark.parametrize("after", [3, 40])
def test_a_writer_killed_mid_write_leaves_an_intact_memory(tmp_path, after):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    last = 0
    for _ in range(after):
        last = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)  # at once: most likely inside the next add's transaction
    proc.wait()
    db = sqlite3.connect(tmp_path / FILE)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    store = MemoryStore(tmp_path, MemoryConfig(max_bytes=1 << 20))
    entries, damaged = store.entries("a")
    assert damaged == 0 and entries[-1][0] >= last  # every committed entry kept (the newest is never evicted)
    assert store.charged() <= 1 << 20
    store.add("a", [1, 2, 3])  # and it goes on


def test_a_damaged_file_is_one_line_and_a_damaged_row_is_skipped(tmp_path):
    store = MemoryStore(tmp_path)
    store.add("a", [1, 2, 3])
    bad = store.add("a", [4, 5, 6])
    store.db.execute("UPDATE entries SET ids = ? WHERE id = ?", (np.asarray([4, 5, 7], "<u4").tobytes(), bad))
    entries, damaged = store.entries("a")
    assert [ids.tolist() for _, ids in entries] == [[1, 2, 3]] and damaged == 1
    store.close()
    (tmp_path / FILE).write_bytes(b"not a database" * 100)
    with pytest.raises(OmniDraftError) as err:
        MemoryStore(tmp_path)
    assert "\n" not in str(err.value) and "memory clear" in str(err.value)
