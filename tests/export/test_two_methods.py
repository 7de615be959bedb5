"""A target's two methods are lowered side by side (export/two_methods.py): the second in a
forked child whose lowered program comes back through ExecuTorch's serialisation, its weights
filled from this process's own method (the same bytes as one lowered in one process, and weights
this process cannot supply leave the method to it: test_lower.py); a child that fails leaves its
method to this process; a failure here ends the child at once."""

import os
import time

import pytest

import omnidraft.export.two_methods as two_methods


def test_a_failing_child_leaves_its_method_to_this_process():
    parent = os.getpid()

    def lower(names):
        if os.getpid() != parent:
            raise RuntimeError("the child fails")
        return {n: (n, os.getpid()) for n in names}

    got = two_methods.lower_methods(["forward", "decode"], lower)
    assert list(got.items()) == [("forward", ("forward", parent)), ("decode", ("decode", parent))]


def test_a_failure_here_ends_the_child_at_once():
    parent = os.getpid()

    def lower(names):
        if os.getpid() != parent:
            time.sleep(120)
        raise ValueError("this process's method fails")

    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="method fails"):
        two_methods.lower_methods(["forward", "decode"], lower)
    assert time.perf_counter() - t0 < 30  # the child was killed, not waited for
