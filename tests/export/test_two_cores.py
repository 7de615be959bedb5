"""XNNPACK partitions are preprocessed on two cores (export/two_cores.py): every partition's
result comes back in its method's order, half of them from a forked child; a child that fails
leaves its partitions to the parent (the program's bytes with and without it: test_lower.py)."""

import os

from omnidraft.export.two_cores import _split


PROGRAMS = {"forward": ["f0", "f1", "f2"], "decode": ["d0", "d1"]}
SPECS = {"forward": ["a", "b", "c"], "decode": ["d", "e"]}


class Backend:
    fail_in_child = False

    @classmethod
    def preprocess(cls, program, spec):
        if cls.fail_in_child and os.getpid() != PARENT:
            raise RuntimeError("the child fails")
        return program, spec, os.getpid()


PARENT = os.getpid()


def test_every_partition_comes_back_in_order_half_from_a_child(monkeypatch):
    monkeypatch.setattr(Backend, "fail_in_child", False)
    got = _split(Backend, PROGRAMS, SPECS)
    assert {m: [(p, s) for p, s, _ in results] for m, results in got.items()} == {
        m: list(zip(PROGRAMS[m], SPECS[m])) for m in PROGRAMS}
    pids = [pid for results in got.values() for _, _, pid in results]
    assert pids.count(PARENT) == 3 and len(set(pids)) == 2


def test_a_failed_child_leaves_its_partitions_to_the_parent(monkeypatch):
    monkeypatch.setattr(Backend, "fail_in_child", True)
    got = _split(Backend, PROGRAMS, SPECS)
    in_parent = [p for p, _, pid in got["forward"] + got["decode"] if pid == PARENT]
    assert in_parent == ["f0", "f1", "f2", "d0", "d1"]
