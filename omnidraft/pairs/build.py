"""Names to runnable parts: the drafter on its runtime (eager PyTorch or the exported ExecuTorch
program), and the target (a local model on either runtime, a remote `omnidraft serve-target`, or
a remote one that falls back to a local model) with its tokenizer. Runtime ``auto`` is the
ExecuTorch program when one was exported for the model, else (a target's ``.gguf`` file, where
llama-cpp-python is installed) llama.cpp, else eager PyTorch (with a note).

Shared by the CLI and ``Session``; knows the loaders and runtimes, nothing about decoding. It
imports remote/ because a URL names a remote target (remote/remote.py, remote/openai_api.py);
remote/ imports nothing of the pairing.
"""

from __future__ import annotations

from omnidraft.sampling import SamplingConfig
from omnidraft.errors import OmniDraftError
from omnidraft.models.lm import LM
from omnidraft.models.loading import load_model, load_tokenizer, resolve
from omnidraft.pairs.settings import RUNTIMES, TARGET_RUNTIMES, Runtime, TargetRef
from omnidraft.pairs.spec import REMOTE_SCHEMES

TARGET_QUANT = "8da8w"  # the target program's scheme on AVX2: bench/results/verify-cost-20261123-2209.md
LLAMACPP_CONTEXT = 4096  # a llama.cpp target's window (its KV cache: ~0.1 GB for the 1.5B in f16)


def is_remote(target: str) -> bool:
    """An `omnidraft serve-target` URL, or ``openai+http(s)://`` an OpenAI-compatible server."""
    return target.startswith(REMOTE_SCHEMES)


def runtime_kind(lm: LM) -> str:
    """Which runtime runs ``lm``: executorch (an exported program), llamacpp (a GGUF on llama.cpp)
    or eager (PyTorch)."""
    from omnidraft.device.llamacpp import LlamaCppLM
    from omnidraft.device.runtime import ExecuTorchLM

    from omnidraft.models.slots import inner

    lm = inner(lm)
    return "executorch" if isinstance(lm, ExecuTorchLM) else "llamacpp" if isinstance(lm, LlamaCppLM) else "eager"


def exactness(target) -> str:
    """How exactly a generation on ``target`` (a LocalTarget, or a server's) is the target's own:
    "bit-exact" where its multi-token calls compute the logits one token at a time would (the
    ExecuTorch program, and models that say ``batch_invariant``), so the greedy text equals the
    target alone's token for token however a prompt was split across calls (a cached preamble, a
    slot's prefix); "logits" elsewhere (eager PyTorch, llama.cpp, a server): exact with respect to
    the logits its calls compute, which are not batch-invariant."""
    from omnidraft.models.slots import inner

    lm = getattr(target, "model", None)
    if lm is None:
        return "logits"
    invariant = runtime_kind(lm) == "executorch" or getattr(inner(lm), "batch_invariant", False)
    return "bit-exact" if invariant else "logits"


def _check_runtime(runtime: str, known: tuple[str, ...] = RUNTIMES) -> None:
    if runtime not in known:
        raise OmniDraftError(f"unknown runtime {runtime!r}", f"use one of {', '.join(known)}")


def _resolve(runtime: str, program) -> str:
    """``auto`` -> executorch when ``program`` (its folder) holds one, else eager."""
    if runtime != "auto":
        return runtime
    return "executorch" if (program / "program.pte").is_file() else "eager"


def _llamacpp_file(name: str) -> bool:
    """``name`` is a GGUF file and llama-cpp-python (the ``llamacpp`` extra) is installed."""
    import importlib.util
    from pathlib import Path

    return name.endswith(".gguf") and Path(name).is_file() and importlib.util.find_spec("llama_cpp") is not None


def _eager(name: str, dtype: str, runtime: str, program, note, why: str = "") -> LM:
    """The eager model; with ``auto``, a note once it loaded (an unknown name is the error)."""
    lm = load_model(name, dtype=dtype)
    if runtime == "auto" and note:
        note(f"{name}: {why or f'no exported program at {program}'}; running it on eager PyTorch (slower, and "
             "exact only with respect to the logits its calls compute: `omnidraft pair` builds the program)")
    return lm


def _program(runtime: str, load, fallback):
    """``load()`` the program; with ``auto``, a program that cannot be loaded (e.g. exported by an
    older version) is ``fallback(reason)`` instead of an error."""
    try:
        return load()
    except OmniDraftError as err:
        if runtime != "auto":
            raise
        return fallback(f"its program cannot be loaded: {err.problem}")


def load_drafter(name: str, runtime: str = "eager", *, quant: str = "8da8w", max_seq: int = 1024,
                 specvocab_k: int = 0, note=None) -> LM:
    """The drafter ``name`` on ``runtime`` with no adapter: ``executorch`` runs the program
    `omnidraft export` wrote for (quant, max_seq, specvocab_k) with its zero adapter, ``eager``
    the fp32 model (pairs/drafter.py puts a published adapter on either)."""
    from omnidraft.export.layout import program_dir

    _check_runtime(runtime)
    prog = program_dir(name, quant, max_seq, specvocab_k)
    if _resolve(runtime, prog) == "executorch":
        from omnidraft.device.runtime import ExecuTorchLM
        from omnidraft.export.layout import find_program

        return _program(runtime, lambda: ExecuTorchLM(find_program(name, quant, max_seq, specvocab_k), name=name),
                        lambda why: _eager(name, "fp32", runtime, prog, note, why))
    return _eager(name, "fp32", runtime, prog, note)


def local_target(name: str, runtime: str = "eager", *, quant: str = TARGET_QUANT, max_seq: int = 1024,
                 dtype: str = "bf16", note=None, exact: bool = False) -> LM:
    """The target model ``name`` on ``runtime`` (``executorch``: its target program from
    `omnidraft export --target`, every position's logits; ``llamacpp``: its GGUF, a catalog
    model's packaged file or the ``.gguf`` path itself, on llama.cpp with a LLAMACPP_CONTEXT window).
    With ``auto``, a ``.gguf`` path with no exported program runs on llama.cpp where it is installed
    (not with ``exact``: then PyTorch), rather than dequantised into PyTorch on every load."""
    from omnidraft.export.layout import program_dir

    _check_runtime(runtime, TARGET_RUNTIMES)
    prog = program_dir(name, quant, max_seq, role="target")
    if runtime == "auto" and _resolve(runtime, prog) == "eager" and not exact and _llamacpp_file(name):
        runtime = "llamacpp"
        if note:
            note(f"{name}: no exported program; running the GGUF on llama.cpp")
    if runtime == "llamacpp":
        import torch

        from omnidraft.device.llamacpp import LlamaCppLM
        from omnidraft.pairs.llamacpp import llamacpp_gguf

        gguf = llamacpp_gguf(name, note or (lambda _m: None))
        return LlamaCppLM(gguf, n_ctx=LLAMACPP_CONTEXT, threads=torch.get_num_threads(), name=name)
    if _resolve(runtime, prog) == "executorch":
        from omnidraft.device.runtime import ExecuTorchLM

        if not (prog / "program.pte").is_file():
            raise OmniDraftError(f"no exported {quant} target program of {name} with max_seq {max_seq}",
                                 f"run `omnidraft export --target {name} --quant {quant} --max-seq {max_seq}`")
        return _program(runtime, lambda: ExecuTorchLM(prog, name=name),
                        lambda why: _eager(name, dtype, runtime, prog, note, why))
    return _eager(name, dtype, runtime, prog, note)


RESIDENT_PER_FILE_BYTE = {"llamacpp": 1.2, "executorch": 1.4}  # resident bytes a load adds per byte of its file


def resident_estimate(name: str, runtime: str, *, quant: str = TARGET_QUANT, max_seq: int = 1024) -> int:
    """Bytes the target ``name`` would add to this process on ``runtime`` (``llamacpp`` or
    ``executorch``), from its file's size as measured here: llama.cpp reads its GGUF into memory
    and repacks it (the 0.5B's 0.49 GB file added 0.59 GB; the 1.5B's 1.04 GiB 1.21 GiB); a program
    packs its weights and keeps part of its file mapped (the 0.5B's 0.63 GB file added 0.88 GB,
    docs/programs.md). 0 where there is no file to load."""
    from omnidraft.export.layout import program_dir

    if runtime == "llamacpp":
        from omnidraft.pairs.llamacpp import gguf_of

        path = gguf_of(name, lambda _m: None)
    else:
        path = program_dir(name, quant, max_seq, role="target") / "program.pte"
    size = path.stat().st_size if path is not None and path.is_file() else 0
    return int(size * RESIDENT_PER_FILE_BYTE[runtime])


def load_target(target: TargetRef, *, sampling: SamplingConfig, verify: str, runtime: Runtime = Runtime(),
                note=None, exact: bool = False):
    """(the Target, its tokenizer) for ``target`` (pairs/settings.py), verifying with ``sampling``
    in mode ``verify``. A local model is a LocalTarget over the model on ``runtime.target``; an
    http(s) URL a RemoteTarget (its tokenizer defaults to the fallback's, else the model name the
    server reports); an openai+ URL an OpenAITarget (remote/openai_api.py) whose tokenizer is
    ``target.tokenizer`` (default: the fallback's). A remote target is wrapped to continue on the
    local model ``target.fallback`` when the server is unreachable."""
    from omnidraft.decode.target import LocalTarget

    if not target.remote:
        lm = local_target(target.ref, runtime.target, dtype=runtime.dtype, note=note, exact=exact)
        return LocalTarget(lm, sampling, verify), load_tokenizer(target.tokenizer or target.ref)
    from omnidraft.remote.remote import FallbackTarget, RemoteTarget

    if not target.token:
        raise OmniDraftError("a remote target needs a bearer token", "pass token=... or set OMNIDRAFT_TOKEN")
    if target.ref.startswith("openai+"):
        name = target.tokenizer or target.fallback
        if not name:
            raise OmniDraftError("an OpenAI-API target needs its tokenizer",
                                 "pass --target-tokenizer (a catalog name or model dir of the served model)")
        tok = load_tokenizer(name)
        remote = _openai_target(target, tok, name, sampling=sampling, verify=verify)
    else:
        remote = RemoteTarget(target.ref, target.token, sampling, verify)
        tok = load_tokenizer(target.tokenizer or target.fallback or remote.info()["model"])
    if target.fallback:
        fallback = LocalTarget(load_model(target.fallback, dtype=runtime.dtype), sampling, verify, stream="fallback")
        return FallbackTarget(remote, fallback), tok
    return remote, tok


def _openai_target(target: TargetRef, tok, tokenizer: str, *, sampling: SamplingConfig, verify: str):
    """The OpenAITarget at ``target.ref``; its EOS ids: ``tok``'s and those of the generation
    config beside the tokenizer ``tokenizer`` names."""
    from omnidraft.decode.text import generation_eos_ids
    from omnidraft.remote.openai_api import OpenAITarget

    if verify != "point-mass" and not sampling.greedy:
        raise OmniDraftError("an OpenAI-API target verifies by point-mass", "drop --verify rejection")
    eos = {tok.eos_token_id} - {None}
    try:
        from transformers import GenerationConfig

        eos |= generation_eos_ids(GenerationConfig.from_pretrained(str(resolve(tokenizer)[0])))
    except (OSError, ValueError):  # no generation config beside the tokenizer: its EOS alone
        pass
    return OpenAITarget(target.ref.removeprefix("openai+"), target.token, target.model, tok, sampling, eos_ids=eos,
                        max_length=target.context, engine=target.engine)
