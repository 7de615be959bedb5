"""A conversation's state saved from a loaded program and restored (device/kv_state.py through
ExecuTorchLM.state / restore): the next logits are the same bits as if the conversation had been
read again, through either method (the one-token ``decode`` inside its window, ``forward`` past
it), in the program it came from after another conversation overwrote the caches and in another
load of the same program; a state from other weights is refused."""

import pytest
import torch

from omnidraft.errors import OmniDraftError

from ..conftest import vocab_len
from ..export import same_bytes

pytest.importorskip("executorch")


@pytest.fixture(scope="module")
def program(qwen_tok, tmp_path_factory):
    prog, _ = same_bytes.shipped(tmp_path_factory, vocab_len(qwen_tok))
    return prog


def _ids(n: int, seed: int) -> list[int]:
    return [int(x) for x in torch.randint(0, 150000, (n,), generator=torch.Generator().manual_seed(seed))]


def _next(lm, follow: list[int]) -> list[torch.Tensor]:
    """Logits of one token at a time, then of a verify-wide call (both methods where they apply)."""
    out = [lm.extend([t]).logits for t in follow[:3]]
    return [*out, lm.extend(follow[3:]).logits]


@pytest.mark.parametrize("held", [40, 90])  # inside the decode window (64), and past it
def test_a_restored_conversation_continues_as_if_read_again(program, held):
    from omnidraft.device.runtime import ExecuTorchLM

    lm = ExecuTorchLM(program)
    ids, follow = _ids(held, 0), _ids(8, 1)
    lm.extend(ids)
    saved = lm.state()
    assert saved.ids == tuple(ids) and saved.nbytes > 0
    ref = _next(lm, follow)
    lm.reset()
    lm.extend(_ids(held + 20, 2))  # another conversation writes over every position the state held
    lm.restore(saved)
    assert lm.length == held
    assert all(torch.equal(a, b) for a, b in zip(ref, _next(lm, follow)))
    other = lm.twin()  # the same program loaded again: its own caches, the same weights
    other.restore(saved)
    assert all(torch.equal(a, b) for a, b in zip(ref, _next(other, follow)))


def test_a_state_from_other_weights_is_refused(program):
    from dataclasses import replace

    from omnidraft.device.runtime import ExecuTorchLM

    lm = ExecuTorchLM(program)
    lm.extend(_ids(10, 3))
    saved = lm.state()
    with pytest.raises(OmniDraftError, match="another program or adapter"):
        lm.restore(replace(saved, weights="0123456789abcdef:other.ptd"))
    assert lm.length == 10  # nothing changed
