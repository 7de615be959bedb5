"""OmniDraft and vLLM (the ``vllm`` extra): ``OmniDraftProposer``, OmniDraft's drafter, translator
and copies behind vLLM's ``custom_class`` speculative interface (omnidraft/vllm/proposer.py), and
the launcher of a real vLLM server the vllm test tier and the benchmark use (launch.py).

    --speculative-config '{"method": "custom_class", "model": "omnidraft.vllm.OmniDraftProposer",
                           "num_speculative_tokens": 8}'
"""

from __future__ import annotations


def __getattr__(name: str):
    if name == "OmniDraftProposer":  # imported only inside vLLM (it needs vLLM's config types)
        from omnidraft.vllm.proposer import OmniDraftProposer

        return OmniDraftProposer
    raise AttributeError(name)
