"""Keeps the libraries' notes to their own developers out of a command's output: Python
warnings raised from torch, torchao, ExecuTorch, transformers and peft (deprecations, tracing
remarks), transformers' own log below errors (e.g. the deprecation notes its assisted generation
prints about its own internal calls) and its weight-loading progress bars.

``quiet_libraries`` is for programs (the CLI, the benchmark scripts): the library itself never
changes the logging of an application that imports it. What the library does instead is call the
libraries so that they have nothing to warn about (e.g. transformers' ``cache=`` rather than its
deprecated ``past_key_values=``), and while it loads a model or an adapter itself
(``loading_quietly``) keep transformers' weight-loading bars off and ignore the warnings those
libraries raise from their own code (peft asks transformers a deprecated question on every
adapter it wraps), restoring both afterwards. Knows those libraries' logger and
module names, nothing else.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Iterator

LIBRARIES = r"(torch|torchao|executorch|transformers|peft|accelerate|copyreg)(\.|$)"


def quiet_libraries() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight-loading bars; our own progress lines stay
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module=LIBRARIES)


@contextmanager
def loading_quietly() -> Iterator[None]:
    """For the duration (a model or adapter OmniDraft loads for the user): transformers' progress
    bars off and the libraries' own warnings ignored; both as they were afterwards."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=LIBRARIES)
            yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
