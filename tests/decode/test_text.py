"""Text in and out: conversations through the chat template, stop strings over streamed text, and
the pieces a generation streams (each with its source) adding up to its text."""

from __future__ import annotations

import pytest

from omnidraft.decode.text import StopText, encode_messages, encode_prompt
from omnidraft.errors import OmniDraftError


def test_a_conversation_encodes_through_the_template_and_one_turn_as_a_chat_prompt(qwen_tok):
    one = encode_messages(qwen_tok, [{"role": "user", "content": "hi"}])
    assert one == encode_prompt(qwen_tok, "hi", chat=True)
    two = encode_messages(qwen_tok, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                                     {"role": "user", "content": "more"}])
    assert qwen_tok.decode(two).count("<|im_start|>") == 5  # system, user, assistant, user, and the opened turn
    for bad in ([], [{"role": "robot", "content": "x"}], [{"role": "user", "content": 3}],
                [{"role": "user", "content": "   "}], "hi"):
        with pytest.raises(OmniDraftError):
            encode_messages(qwen_tok, bad)


@pytest.mark.parametrize("pieces,stops,shown,hit", [
    (["hello </", "en", "d> more"], ["</end>"], "hello ", True),  # a stop split across pieces
    (["xa", "a", "c"], ["ab"], "xaac", False),  # a held-back prefix that turned out not to be one
    (["one\ntwo"], ["\n", "two"], "one", True),  # the earliest stop wins
    (["abc"], [], "abc", False),
])
def test_stop_strings_hold_back_a_possible_start_and_cut_at_the_first(pieces, stops, shown, hit):
    st = StopText(stops)
    out, ended = "", False
    for p in pieces:
        text, ended = st.push(p)
        out += text
        if ended:
            break
    if not ended:
        out += st.flush()
    assert (out, ended) == (shown, hit)


def test_streamed_pieces_say_their_source_and_add_up_to_the_text(cross):
    from omnidraft.decode.draft_length import FixedK
    from omnidraft.decode.generate import pieces_speculative
    from omnidraft.decode.target import LocalTarget
    from omnidraft.propose.config import SpecConfig
    from omnidraft.propose.lookup import LookupConfig

    d, t, pair = cross
    prompt = "a = b\nb = a\na = b\nb = a\na ="
    gen = pieces_speculative(d, LocalTarget(t), pair, encode_prompt(pair.target_tok, prompt, chat=False),
                             encode_prompt(pair.draft_tok, prompt, chat=False), cfg=SpecConfig("omnidraft"),
                             k=FixedK(3), budget=30, lookup=LookupConfig())
    pieces = []
    while True:
        try:
            pieces.append(next(gen))
        except StopIteration as done:
            result = done.value
            break
    assert "".join(p.text for p in pieces) == result.text and sum(p.tokens for p in pieces) == len(result.token_ids)
    assert {p.source for p in pieces} <= {"drafted", "copied", "target"} and "target" in {p.source for p in pieces}
    assert result.finish_reason in ("stop", "length")
