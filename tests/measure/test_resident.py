"""measure/resident.py: a process's resident memory by what holds it, from /proc."""

from __future__ import annotations

import mmap
import sys

import pytest

from omnidraft.measure.resident import resident

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")


def test_a_mapped_model_file_is_a_part_of_its_own_while_it_is_mapped(tmp_path):
    path = tmp_path / "program-dir" / "program.pte"
    path.parent.mkdir()
    size = 8 << 20
    path.write_bytes(b"\1" * size)
    before = resident()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert sum(m[i] for i in range(0, size, 4096)) == size // 4096  # every page read in
        during = resident()
    after = resident()
    assert "program-dir/program.pte" not in before and during["program-dir/program.pte"] >= size
    assert "program-dir/program.pte" not in after  # unmapped: no longer resident here
    assert after["total"] >= after["anonymous"] and after["peak"] >= after["total"]
    assert sum(v for k, v in during.items() if k not in ("total", "peak")) == pytest.approx(during["total"], rel=0.05)


def test_a_process_that_is_gone_is_nothing():
    assert resident(2 ** 22 + 12345) == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_pages_a_forked_child_shares_with_its_parent_count_once_in_pss():
    import os

    from omnidraft.measure.resident import proportional

    held = bytearray(200_000_000)
    held[::4096] = b"x" * len(held[::4096])  # resident
    alone = proportional()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reads nothing, writes nothing: it shares every page
        os.read(r, 1)
        os._exit(0)
    try:
        both = proportional() + proportional(pid)
        assert alone >= 200e6 and both < alone + 50e6  # RSS would count the 200 MB twice
    finally:
        os.write(w, b"x")
        os.waitpid(pid, 0)
