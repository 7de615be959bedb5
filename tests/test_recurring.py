"""The recurring work the memory suite streams and holds out: distinct prompts, the same each run,
the held-out ones never in the stream (its functions of the codebase included), a bad kind one line."""

import pytest

from omnidraft.errors import OmniDraftError
from omnidraft.recurring import FUNCTIONS, HELD_FUNCTIONS, KINDS, recurring


def test_held_out_prompts_are_never_in_the_stream_and_both_are_reproducible():
    for kind in KINDS:
        stream, held = recurring(kind, 40), recurring(kind, 12, held=True)
        assert len(set(stream)) == 40 and len(set(held)) == 12 and not set(stream) & set(held)
        assert recurring(kind, 40) == stream
    held_sources = [src for _, src in FUNCTIONS[-HELD_FUNCTIONS:]]
    assert not any(src in p for p in recurring("tests", 48) for src in held_sources)
    assert all(any(src in p for src in held_sources) for p in recurring("tests", 8, held=True))
    with pytest.raises(OmniDraftError, match="unknown recurring kind 'poems'"):
        recurring("poems", 1)
