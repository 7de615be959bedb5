"""Integration tier: `omnidraft serve`'s app on the real pair (SmolLM2-135M drafting for
Qwen2.5-Coder-0.5B, both fp32 on PyTorch so greedy equality is exact), driven by the official
`openai` SDK: streamed and non-streamed chat and completions equal the target's own greedy output,
and a follow-up turn after a long pasted file reads only its new tokens, so its time to first token
is well under half the first turn's."""

from __future__ import annotations

import time

import openai
import pytest

from omnidraft.decode.generate import stream_ar
from omnidraft.decode.target import LocalTarget
from omnidraft.decode.text import drained, encode_messages, encode_prompt
from omnidraft.pairs.settings import Runtime

from ..serve.conftest import KEY, serving

pytestmark = pytest.mark.integration

EAGER = Runtime(drafter="eager", target="eager", dtype="fp32")
FILE = '''import json
from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 1

    def total(self) -> float:
        return self.price * self.quantity


class Cart:
    def __init__(self):
        self.items: list[Item] = []

    def add(self, item: Item) -> None:
        for existing in self.items:
            if existing.name == item.name:
                existing.quantity += item.quantity
                return
        self.items.append(item)

    def remove(self, name: str) -> None:
        self.items = [i for i in self.items if i.name != name]

    def total(self) -> float:
        return sum(i.total() for i in self.items)

    def to_json(self) -> str:
        return json.dumps([i.__dict__ for i in self.items])

    @classmethod
    def from_json(cls, text: str) -> "Cart":
        cart = cls()
        for row in json.loads(text):
            cart.add(Item(**row))
        return cart


def apply_discount(cart: Cart, percent: float) -> Cart:
    """A new cart whose every price is ``percent`` lower."""
    if not 0 <= percent <= 100:
        raise ValueError(f"percent must be in 0..100, got {percent}")
    out = Cart()
    for item in cart.items:
        out.add(Item(item.name, round(item.price * (1 - percent / 100), 2), item.quantity))
    return out


def cheapest(cart: Cart) -> Item | None:
    """The item with the lowest price, or None for an empty cart."""
    return min(cart.items, key=lambda i: i.price, default=None)


def summary(cart: Cart) -> str:
    lines = [f"{i.quantity} x {i.name} at {i.price:.2f} = {i.total():.2f}" for i in cart.items]
    lines.append(f"total: {cart.total():.2f}")
    return "\n".join(lines)
'''


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    from omnidraft.models.loading import load_tokenizer
    from omnidraft.session import Session

    from omnidraft.home import scratch_home

    with pytest.MonkeyPatch.context() as mp:
        # the models the README's `omnidraft models fetch` put in the home, nothing else of it: the pair's
        # cost model is measured first, as in a fresh home (a fresh home would also convert both models)
        mp.setenv("OMNIDRAFT_HOME", str(scratch_home(tmp_path_factory.mktemp("real") / "home")))
        make = lambda: Session("smollm2-135m", "qwen2.5-coder-0.5b", runtime=EAGER, slots=2, log=False)  # noqa: E731
        with serving(make, model="qwen2.5-coder-0.5b", start_s=900) as (url, runner):
            target = LocalTarget(runner.session.target.model.lms[0].fork())  # the same weights, a cache of its own
            yield openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0), target, load_tokenizer(
                "qwen2.5-coder-0.5b")


def _own(target, tok, ids, n):
    return drained(stream_ar(target, tok, ids, max_new_tokens=n)).text


def test_chat_and_completions_on_the_real_pair_are_the_targets_own_greedy_output(real):
    c, target, tok = real
    messages = [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]
    ref = _own(target, tok, encode_messages(tok, messages), 32)
    whole = c.chat.completions.create(model="qwen2.5-coder-0.5b", messages=messages, max_tokens=32)
    assert whole.choices[0].message.content == ref
    streamed = c.chat.completions.create(model="qwen2.5-coder-0.5b", messages=messages, max_tokens=32, stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices) == ref
    prompt = "def fibonacci(n):\n"
    ref = _own(target, tok, encode_prompt(tok, prompt, chat=False), 32)
    assert c.completions.create(model="qwen2.5-coder-0.5b", prompt=prompt, max_tokens=32).choices[0].text == ref


def test_a_follow_up_after_a_long_file_reads_only_its_new_tokens(real):
    c, target, tok = real

    def first_token_s(messages):
        t0 = time.perf_counter()
        stream = c.chat.completions.create(model="qwen2.5-coder-0.5b", messages=messages, max_tokens=16, stream=True,
                                           stream_options={"include_usage": True})
        ttft, text, usage = None, "", None
        for ch in stream:
            if ch.choices and ch.choices[0].delta.content:
                ttft = ttft or time.perf_counter() - t0
                text += ch.choices[0].delta.content
            usage = ch.usage or usage
        return ttft, text, usage

    turn1 = [{"role": "user", "content": f"Here is cart.py:\n```python\n{FILE}```\nAdd a docstring to Cart.add."}]
    ttft1, answer, usage1 = first_token_s(turn1)
    assert usage1.prompt_tokens > 450
    turn2 = turn1 + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Now rename add to put."}]
    ttft2, text2, usage2 = first_token_s(turn2)
    print(f"time to first token: first turn {ttft1:.3f} s ({usage1.prompt_tokens} prompt tokens), follow-up "
          f"{ttft2:.3f} s ({usage2.prompt_tokens_details.cached_tokens} of {usage2.prompt_tokens} cached)")
    assert usage2.prompt_tokens_details.cached_tokens >= usage1.prompt_tokens
    assert ttft2 < 0.5 * ttft1
    assert text2 == _own(target, tok, encode_messages(tok, turn2), 16)
