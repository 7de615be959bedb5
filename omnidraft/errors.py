"""User-facing errors: one line saying what went wrong and what to do about it.

Raised by the library wherever the cause is the user's input or environment; the CLI prints
them without a traceback and exits non-zero. Knows nothing about models or decoding.
"""

from __future__ import annotations


class OmniDraftError(Exception):
    """An error a user can act on. ``str(err)`` is one line: the problem, then the remedy."""

    def __init__(self, problem: str, remedy: str | None = None):
        self.problem = problem
        self.remedy = remedy
        super().__init__(problem if not remedy else f"{problem} ({remedy})")


class ContextFull(OmniDraftError):
    """A prompt (with the tokens asked for) that does not fit the model's context window."""
