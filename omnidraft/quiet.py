"""Keeps the libraries' notes to their own developers out of a command's output: Python
warnings raised from torch, torchao, ExecuTorch, transformers and peft (deprecations, tracing
remarks), transformers' own log below errors (e.g. the deprecation notes its assisted generation
prints about its own internal calls) and its weight-loading progress bars.

For programs (the CLI, the benchmark scripts): the library itself never changes the logging of
an application that imports it. Knows those libraries' logger and module names, nothing else.
"""

from __future__ import annotations

import warnings

LIBRARIES = r"(torch|torchao|executorch|transformers|peft|accelerate|copyreg)(\.|$)"


def quiet_libraries() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight-loading bars; our own progress lines stay
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module=LIBRARIES)
