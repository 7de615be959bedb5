"""The verification log's stamp: what the idle daemon compares instead of counting. It must move
whenever any connection appends (the daemon's own connection stays open while a Session in
another process writes), and stay put while nothing is appended."""

from omnidraft.train.verlog import VerificationLog


def test_the_stamp_moves_when_another_connection_appends_and_only_then(tmp_path):
    path = tmp_path / "verlog.sqlite"
    watcher, writer = VerificationLog(path), VerificationLog(path)
    try:
        writer.append("pair", "prompt 0", b"record")
        before = watcher.stamp()
        assert watcher.count("pair") == 1 and watcher.read("pair") and watcher.stamp() == before  # reads move nothing
        for i in range(1, 4):
            writer.append("pair", f"prompt {i}", b"record")
            now = watcher.stamp()
            assert now != before, f"append {i} left the stamp as it was"
            before = now
    finally:
        writer.close()
        watcher.close()
