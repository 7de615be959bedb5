"""The vLLM rows' parts that run without vLLM: a restarted proposer's memory is a consistent copy
of the used row's as it was (never what that row keeps after), a restart row needs its used row,
and a phase of vLLM rows is measured against vLLM alone."""

import pytest

from omnidraft.bench.suites import Options, suite
from omnidraft.bench.vllm_rows import copy_memory
from omnidraft.errors import OmniDraftError
from omnidraft.memory.spaces import Memories


def test_a_restarted_proposers_memory_is_the_used_ones_as_it_was(tmp_path):
    used = Memories(tmp_path / "used").space("vllm")  # held open, as the used row's server holds it
    used.generation().remember([1, 2, 3, 4, 5], {})
    copy_memory(tmp_path / "used", tmp_path / "copy")
    used.generation().remember([6, 7, 8, 9], {})  # what the used row keeps later is its own
    copy = Memories(tmp_path / "copy").space("vllm")
    copy.sync()
    assert copy.index.entries == 1 and copy.generation().find([0, 1, 2, 3], 4).continuation == [4, 5]
    used.sync()
    assert used.index.entries == 2


def test_a_restart_row_needs_its_used_row_and_a_vllm_phase_is_against_vllm_alone():
    with pytest.raises(OmniDraftError, match="vllm-proposer-used"):
        suite("memory").build(Options(rows=("vllm-proposer-reopened",)), lambda s: None)
    memory = suite("memory")
    assert memory.reference_in({"vllm", "vllm-suffix-used"}) == "vllm"
    assert memory.reference_in({"target", "vllm", "remembered"}) == "target"
    assert suite("pair").reference_in({"vllm", "product"}) == "target"
