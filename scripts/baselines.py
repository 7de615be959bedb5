"""The honest alternatives every speed table carries: the target alone on llama.cpp (the
packaged GGUF, greedy; when llama-cpp-python is installed) and transformers' assisted generation
(the target in bf16 by default, or fp32 where the CPU has no bf16 arithmetic, with the drafter,
heterogeneous vocabularies) at its default and at its best setting here (5 tokens a draft,
constant schedule: 1.07-1.14x its default on this machine).

Each is a run(prompt ids, new tokens) -> (tokens generated, seconds, prefill included). Knows
transformers' generate (llama.cpp's runner is the product's: omnidraft/pairs/llamacpp.py);
nothing about OmniDraft's decoding.
"""

from __future__ import annotations

from typing import Callable

ASSISTED = {"default": None, "5 tokens, constant": 5}  # label -> num_assistant_tokens
BEST = "5 tokens, constant"


def assisted_name(label: str, dtype: str = "bf16") -> str:
    return f"transformers assisted generation, {label} ({dtype} target, UAG)"


def baselines(target: str, drafter: str, threads: int, log: Callable[[str], None],
              assisted: tuple[str, ...] = tuple(ASSISTED), dtype: str = "bf16",
              target_hf=None) -> dict[str, Callable]:
    """name -> run, for llama.cpp (when installed) and each of ``assisted``'s settings; the
    transformers target in ``dtype``, or ``target_hf`` when the caller has it loaded already."""
    from omnidraft.bench.rows import assisted as hf_assisted
    from omnidraft.decode.text import generation_eos_ids
    from omnidraft.pairs.llamacpp import INSTALL, LlamaCppAlone
    from omnidraft.models.catalog import ensure_gguf
    from omnidraft.models.loading import load_model, load_tokenizer

    ttok, dtok = load_tokenizer(target), load_tokenizer(drafter)
    if assisted:  # the transformers models only where a row needs them
        target_hf = target_hf if target_hf is not None else load_model(target, dtype=dtype).model
        drafter_hf = load_model(drafter, dtype="fp32").model
        eos = generation_eos_ids(target_hf.generation_config)
    else:  # llama.cpp adds the GGUF's own end-of-generation ids
        eos = {ttok.eos_token_id}
    runs = {}
    try:
        runs["llama.cpp target alone"] = LlamaCppAlone(ensure_gguf(target, progress=log), threads, eos, ttok,
                                                        n_ctx=1024)
    except ImportError:
        log(f"llama-cpp-python is not installed ({INSTALL}): no llama.cpp baseline")

    for label in assisted:
        def run(ids, new, n_tokens=ASSISTED[label]):
            out, secs = hf_assisted(target_hf, drafter_hf, ttok, dtok, ids, new, eos, n_tokens)
            return len(out), secs

        runs[assisted_name(label, dtype)] = run
    return runs
