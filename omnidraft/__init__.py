"""OmniDraft: one small drafter speeds up any target model by cross-vocabulary speculative decoding."""

import logging as _logging

# Third-party import-time noise (torchao's optional CUDA kernels, a torch pytree deprecation)
# says nothing a CPU user can act on.
_logging.getLogger("torchao").setLevel(_logging.ERROR)
_logging.getLogger("torch.utils._pytree").setLevel(_logging.ERROR)

__version__ = "0.1.0"


_FRONT = {"Session": "omnidraft.session", "TargetRef": "omnidraft.pairs.settings",
          "Runtime": "omnidraft.pairs.settings", "SpecConfig": "omnidraft.propose.config",
          "SamplingConfig": "omnidraft.sampling"}


def __getattr__(name):  # omnidraft.Session and its settings without importing torch at package import
    if name in _FRONT:
        import importlib

        return getattr(importlib.import_module(_FRONT[name]), name)
    raise AttributeError(name)
