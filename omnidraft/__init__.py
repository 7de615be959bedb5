"""OmniDraft: one small drafter speeds up any target model by cross-vocabulary speculative decoding."""

import logging as _logging

# Third-party import-time noise (torchao's optional CUDA kernels, a torch pytree deprecation)
# says nothing a CPU user can act on.
_logging.getLogger("torchao").setLevel(_logging.ERROR)
_logging.getLogger("torch.utils._pytree").setLevel(_logging.ERROR)

__version__ = "0.1.0"


def __getattr__(name):  # omnidraft.Session without importing torch at package import
    if name == "Session":
        from omnidraft.session import Session

        return Session
    raise AttributeError(name)
