"""A result names the commit it measured and whether the tree had changes (measure/stamp.py)."""

import subprocess

from omnidraft.measure.stamp import cpu_line, git_state, stamp


def git(where, *args):
    return subprocess.run(["git", "-C", str(where), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_the_stamp_names_the_commit_and_a_dirty_tree(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert git_state(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "new.txt").write_text("untracked files leave the tree clean\n")
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    assert git_state(tmp_path) == {"commit": head, "dirty": True}



def test_outside_a_checkout_the_commit_is_unknown(tmp_path):
    (tmp_path / "plain").mkdir()
    assert git_state(tmp_path / "plain") == {"commit": None, "dirty": None}


def test_every_result_states_the_cpu_threads_and_versions():
    s = stamp("pair", 2, options={"k": 1})
    assert s["suite"] == "pair" and s["threads"] == 2 and s["options"] == {"k": 1}
    assert s["cpu"]["line"] == cpu_line(s["cpu"], 2) and s["cpu"]["line"].endswith(", 2 threads")
    assert s["cpu"]["model"] in s["cpu"]["line"] and "torch" in s["versions"]
    assert "commit" in s and "dirty" in s
