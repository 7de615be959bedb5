"""/metrics' counters (serve/runner.py Counters): prompt tokens a saved conversation state gave
back are counted by where it was kept, apart from the prompt tokens a cache already held."""

from omnidraft.decode.generate import Result
from omnidraft.serve.runner import Counters


def test_restored_prompt_tokens_are_counted_by_where_they_were_kept():
    c = Counters()
    for where, n in (("ram", 120), ("disk", 300), (None, 0), ("ram", 5)):
        c.add(Result("x", [1, 2], {"prompt_tokens": n + 10, "prompt_cached": n, "prompt_restored": n,
                                   "restored_from": where}, finish_reason="stop"), 0.1)
    assert (c.prompt_restored_ram, c.prompt_restored_disk, c.prompt_cached) == (125, 300, 425)
