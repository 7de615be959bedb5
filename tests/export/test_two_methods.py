"""A target's two methods are lowered side by side (export/two_methods.py): the second in a
forked child whose lowered program comes back through ExecuTorch's serialisation, its weights
filled from this process's own method. The program has the same bytes as one lowered in one
process; a child that fails, or weights this process cannot supply, leave the method to this
process (still the same bytes); a failure here ends the child at once."""

import os
import time
import types

import pytest
import torch

import omnidraft.export.two_methods as two_methods

from .same_bytes import export, without


def one_process(names, lower):
    return lower(names)


def test_the_program_is_byte_identical_with_and_without_it(shipped, tmp_path, monkeypatch):
    program = shipped("target")
    assert program.children == [True]  # the child lowered "decode"
    assert without("lower_methods", "target", tmp_path, monkeypatch, instead=one_process) == program.pte


def test_weights_this_process_lacks_leave_the_method_to_it(shipped, tmp_path, monkeypatch):
    program = shipped("target")  # first: _load is replaced below
    nothing = types.SimpleNamespace(graph_module=torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph()))
    real, got = two_methods._load, []
    monkeypatch.setattr(two_methods, "_load", lambda path, mine: got.append(real(path, nothing)) or got[-1])
    assert export("target", tmp_path) == program.pte
    assert got == [None]


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
