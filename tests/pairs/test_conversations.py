"""Conversations on one loaded program with saved states (pairs/conversations.py over
device/saved_states.py): a conversation that comes back after another restores its caches instead
of reading them again, the next logits the same bits as a fresh read; after a restart (a new
program load and store over the same folder) it restores from disk; a conversation short of
MIN_SAVED is not saved, and one that shares only the preamble restores nothing; another API key's
conversation is neither reused from the cache nor restored."""

import pytest
import torch

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.target import LocalTarget
from omnidraft.models import lm as lm_ops
from omnidraft.device.saved_states import SavedStates
from omnidraft.pairs.conversations import MIN_SAVED, Conversations
from omnidraft.pairs.routing import Route

from ..conftest import vocab_len
from ..export import same_bytes

pytest.importorskip("executorch")
PRE = [1, 2, 3]


@pytest.fixture(scope="module")
def program(qwen_tok, tmp_path_factory):
    prog, _ = same_bytes.shipped(tmp_path_factory, vocab_len(qwen_tok))
    return prog


def _ids(n: int, seed: int) -> list[int]:
    return PRE + [int(x) for x in torch.randint(10, 150000, (n,), generator=torch.Generator().manual_seed(seed))]


def _open(program, folder):
    from omnidraft.device.runtime import ExecuTorchLM

    lm = ExecuTorchLM(program)
    states = SavedStates(10**8, folder, 10**9)
    return lm, Conversations(1, [Route("executorch", LocalTarget(lm), FixedK(0))], None, PRE, states=states)


def _run(conv, lm, ids: list[int]) -> None:
    """A generation's effect on the caches: the slot chosen, its prompt read, the turn recorded."""
    slot = conv.slot_for(ids)
    lm_ops.sync(lm, ids)
    conv.ran(slot, ids, [], 0)


def test_a_conversation_that_comes_back_is_restored_not_read_again(program, tmp_path):
    from omnidraft.device.runtime import ExecuTorchLM

    lm, conv = _open(program, tmp_path)
    a, b, short = _ids(MIN_SAVED + 20, 0), _ids(MIN_SAVED + 20, 1), _ids(MIN_SAVED - 10, 2)
    _run(conv, lm, a)
    _run(conv, lm, b)
    assert conv.restored == ("", 0)  # b shares only the preamble with a
    _run(conv, lm, short)
    follow = a + [11, 12]
    conv.slot_for(follow)
    assert conv.restored == ("ram", len(a)) and lm.tokens == a
    fresh = ExecuTorchLM(program)
    lm_ops.sync(fresh, a)
    assert torch.equal(lm.extend(follow[len(a):]).logits, fresh.extend(follow[len(a):]).logits)
    assert conv.states.best(short, {"target:executorch": lm.weights}).shared == len(PRE)  # short was not saved

    lm2, conv2 = _open(program, tmp_path)  # a restart: the program loaded again, the folder read again
    conv2.slot_for(b + [13])
    assert conv2.restored == ("disk", len(b)) and lm2.tokens == b
    lm_ops.sync(fresh, b)
    assert torch.equal(lm2.extend([13]).logits, fresh.extend([13]).logits)


def _run_as(conv, lm, ids: list[int], space: str) -> None:
    slot = conv.slot_for(ids, space)
    lm_ops.sync(lm, ids)
    conv.ran(slot, ids, [], 0)


def test_another_api_keys_conversation_is_neither_reused_nor_restored(program, tmp_path):
    lm, conv = _open(program, tmp_path)
    a = _ids(MIN_SAVED + 20, 3)
    _run_as(conv, lm, a, "key-a")
    weights = {"target:executorch": lm.weights}
    conv.slot_for(a + [11], "key-b")  # the same start, sent with another key
    assert conv.restored == ("", 0) and lm.tokens == PRE  # its cache cut back to the preamble: read again
    assert conv.current.context == [] and conv.current.space == "key-b"
    assert conv.states.best(a, weights, "key-b") is None
    assert conv.states.best(a, weights) is None  # nor in a Session's own space
    conv.slot_for(a + [11], "key-a")  # its own key finds it
    assert conv.restored == ("ram", len(a)) and lm.tokens == a

    lm2, conv2 = _open(program, tmp_path)  # after a restart the files keep whose they were
    conv2.slot_for(a + [11], "key-b")
    assert conv2.restored == ("", 0)
    conv2.slot_for(a + [11], "key-a")
    assert conv2.restored == ("disk", len(a)) and lm2.tokens == a


def test_a_conversation_run_on_a_runtime_not_loaded_after_a_restart_loads_it_and_restores(program, tmp_path):
    from omnidraft.device.runtime import ExecuTorchLM
    from omnidraft.pairs.deferred import Deferred

    def open_():
        first = ExecuTorchLM(program)
        second = Deferred(lambda: ExecuTorchLM(program), ExecuTorchLM, max_length=first.max_length, size=0)
        routes = [Route("executorch", LocalTarget(first), FixedK(0)), Route("llamacpp", LocalTarget(second), FixedK(0))]
        return first, second, Conversations(1, routes, None, PRE, states=SavedStates(10**8, tmp_path, 10**9))

    first, second, conv = open_()
    a = _ids(MIN_SAVED + 20, 4)
    slot = conv.slot_for(a)
    lm_ops.sync(second.load(), a)  # the generation ran on the second runtime
    conv.ran(slot, a, [], 0)
    found = conv.states.best(a, {"target:executorch": first.weights, "target:llamacpp": second.weights})
    assert set(found.states) == {"target:llamacpp"}  # the first runtime held another conversation: not saved

    first, second, conv = open_()  # a restart: the second runtime not loaded
    assert not second.loaded
    conv.slot_for(a + [11])
    assert conv.restored == ("disk", len(a)) and second.loaded and second.tokens == a and first.tokens == PRE

    first, second, conv = open_()  # a Session loads it as it opens: the conversation comes back without the load
    assert conv.load_saved_runtimes() == ["target:llamacpp"] and second.loaded
    assert conv.load_saved_runtimes() == []
