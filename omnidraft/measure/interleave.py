"""The one interleave every measurement runs: each prompt through every row, the rows' order
rotated by one from prompt to prompt, so that no row always runs first (on a cold cache, a
machine just woken) or always right after a given other row (in its cache's wake).

Knows orders; nothing about what a row runs.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence, TypeVar

P = TypeVar("P")
R = TypeVar("R")
T = TypeVar("T")


def rotated(rows: Sequence[R], i: int) -> list[R]:
    """``rows`` in prompt ``i``'s order: started at row ``i`` mod their number."""
    if not rows:
        return []
    i %= len(rows)
    return list(rows[i:]) + list(rows[:i])


def interleaved(prompts: Sequence[P], rows: Sequence[R], run: Callable[[R, P], T], *,
                before: Callable[[P], None] | None = None) -> Iterator[tuple[int, P, R, T]]:
    """(prompt index, prompt, row, what ``run(row, prompt)`` returned) for every prompt and row,
    the rows rotated per prompt; ``before(prompt)`` runs ahead of each row's run (e.g. a cache
    reset so every row starts from the same state)."""
    for i, prompt in enumerate(prompts):
        for row in rotated(rows, i):
            if before is not None:
                before(prompt)
            yield i, prompt, row, run(row, prompt)
