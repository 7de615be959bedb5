"""A pair's memory as generations use it: built on first use, taking in what another process
remembered, built again after a clear; credit to the entries whose proposals were accepted; an
unreadable store said once, the pair going on without it."""

from omnidraft.memory.spaces import Memories


def test_a_memory_takes_in_what_another_process_remembered_and_forgets_a_clear(tmp_path):
    mine, theirs = Memories(tmp_path), Memories(tmp_path)  # two processes' views of one pair's memory
    memory = mine.space("u")
    assert memory.index is None  # nothing read before the first generation
    memory.sync()
    recalls = memory.generation()  # one generation: its lookups counted together
    assert recalls.find([1, 2, 3], 4) is None
    theirs.space("u").generation().remember([1, 2, 3, 4, 5], {})
    theirs.space("v").generation().remember([1, 2, 3, 9, 9], {})  # another space: never seen from "u"
    memory.sync()
    recall = recalls.find([0, 1, 2, 3], 4)
    assert recall.continuation == [4, 5] and memory.index.entries == 1
    recalls.verified_by(recall, 2)
    recalls.remember([7, 8, 9], {"memory": (1, 2, 2)})
    stats = {s.space: s for s in mine._store.stats()}
    assert stats["u"].tally["lookups"] == {"rounds": 2, "proposed": 1, "accepted": 1}  # lookups, found, verified
    helped = mine._store.db.execute("SELECT helped FROM entries WHERE space = 'u' ORDER BY id").fetchall()
    assert helped == [(2,), (0,)]
    theirs._store.clear("u")
    memory.sync()
    assert memory.generation().find([0, 1, 2, 3], 4) is None and memory.index.entries == 0


def test_an_unreadable_memory_is_said_once_and_the_pair_goes_on_without_it(tmp_path):
    (tmp_path / "memory.sqlite").write_bytes(b"\x00garbage" * 64)
    notes = []
    memories = Memories(tmp_path, note=notes.append)
    assert memories.space("u") is None and memories.space("v") is None
    assert len(notes) == 1 and "unreadable" in notes[0]


def test_memory_stats_and_clear_on_the_command_line(tmp_path, monkeypatch, capsys):
    """`omnidraft memory stats` reads each pair's memory (an unreadable one says so), `clear` forgets
    a space or removes an unreadable file, and a pair that does not exist is one line, exit 2."""
    import json

    from omnidraft.cli import main
    from omnidraft.pairs.spec import PairSpec, pair_dir, save_spec

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    good, bad = PairSpec("d", "t"), PairSpec("d", "u")
    save_spec(good)
    save_spec(bad)
    memory = Memories(pair_dir(good.name) / "memory").space("local")
    memory.generation().remember([1, 2, 3, 4], {"memory": (1, 4, 3)})
    (pair_dir(bad.name) / "memory").mkdir()
    (pair_dir(bad.name) / "memory" / "memory.sqlite").write_bytes(b"garbage" * 50)
    assert main(["memory", "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats[good.name]["spaces"][0]["entries"] == 1 and stats[good.name]["spaces"][0]["acceptance"] == {
        "memory": 0.75}
    assert "unreadable" in stats[bad.name]["error"]
    assert main(["memory", "clear"]) == 0
    out = capsys.readouterr().out
    assert f"{good.name}: 1 entries forgotten" in out and f"{bad.name}: an unreadable memory removed" in out
    assert main(["memory", "clear", "--pair", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no pair named 'nope'" in err[0]


def test_a_memory_folder_that_cannot_be_made_is_said_once_and_the_pair_goes_on_without_it(tmp_path):
    (tmp_path / "a-file").write_text("")
    notes = []
    assert Memories(tmp_path / "a-file", note=notes.append).space("u") is None
    assert len(notes) == 1 and "cannot be made" in notes[0] and "\n" not in notes[0]
