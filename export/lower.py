"""Export a drafter or a target to an ExecuTorch program: quantise (torchao), torch.export
(strict), lower to XNNPACK with the per-target LoRA and head weights kept outside the delegate,
and write program.pte + base.ptd (the zero adapter) + program.json (what the .ptd must hold).
A target program has no LoRA and returns every position's logits (what verification needs).

By default the adapter's matmuls run inside XNNPACK while their weights stay in the .ptd: XNNPACK
looks its external constants up by a content key (sha256), so the export fills every adapter
tensor with distinct random values, records each one's key in program.json (``ptd_keys``) and
then writes the real zero adapter under those keys; a later .ptd stores its tensors under the
same keys. ``delegate_adapter=False`` keeps the adapter ops outside the delegate (name-keyed).

Knows torch.export, torchao and the ExecuTorch lowering APIs; nothing about pairs or decoding.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from omnidraft.errors import OmniDraftError
from omnidraft.heap import trim
from omnidraft.models.catalog import sha256_file

from .adapter_data import ptd_entries, read_ptd_keys, write_ptd
from .embedding8 import embeddings_at_8_bits
from .gguf_q4 import Blocks, attach, four_bit_linears, gguf_file, load_codes
from .info import ProgramInfo
from .layout import QUANTS
from .mapped import in_turn, own_memory
from .planning import planner
from .program import DraftProgram, has_llama_layers, is_adapter_param
from .provenance import shared_provenance
from .qc4w import per_channel_int4
from .quant_fakes import shape_only_quant_ops
from .quant_rows import rows_at_a_time
from .two_methods import lower_methods
from .xnnpack_passes import applicable_passes

GROUP_SIZES = (0, 16, 32, 64, 128, 256)  # 0: one scale per output channel
WEIGHT_QPARAMS = ("affine", "hqq")  # torchao's IntxChooseQParamsAlgorithm: AFFINE, HQQ_SCALE_ONLY
MIXED_EIGHT_BIT = ("lm_head", "down_proj")  # the most quantisation-sensitive Linears (cf. llama.cpp's Q4_K_M)
SCHEME_MODIFIERS = {"pc": ("group_size", 0), "hqq": ("weight_qparams", "hqq"), "mix": ("eight_bit", MIXED_EIGHT_BIT),
                    "gguf": ("gguf_weights", True),
                    **{f"g{g}": ("group_size", g) for g in GROUP_SIZES if g}}
ROLES = ("drafter", "target")
ROWS = 64  # positions' logits a target program's call returns at most (max_rows); wider calls go in pieces
WIDTH = 256  # tokens a program's call reads at most (max_width); a longer prompt is read in pieces
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class ExportConfig:
    drafter: str  # catalog name or path of the model (drafter or target), recorded in program.json
    quant: str = "8da4w"  # fp32 | 8da8w (per-channel int8 weights) | 8da4w (int4, group_size)
    max_seq: int = 1024  # static KV cache length = the longest prompt + generation
    group_size: int = 32  # 8da4w weight group size; 0 = one scale per output channel (qc4w.py)
    weight_qparams: str = "affine"  # 8da4w: min-max scales (affine) or HQQ-optimised scales (hqq)
    eight_bit: tuple[str, ...] = ()  # 8da4w: Linears whose names end so keep int8 weights (per channel)
    # 8da4w: the GGUF's own 4-bit weights (Q4_K / Q4_0 codes and block scales, gguf_q4.py) where it
    # has them, every other Linear at 8 bits; needs a GGUF model and groups of 32
    gguf_weights: bool = False
    lora_rank: int = 32
    lora_alpha: float = 32.0  # as TrainConfig.alpha; other alphas are folded into B when writing a .ptd
    lora_targets: tuple[str, ...] = LORA_TARGETS
    head_width: int = 256
    specvocab_k: int = 0  # > 0: the LM head as SpecVocab (ranking + exact logits on k candidates)
    # > 0 (a drafter): the LM head computes the first head_tokens token ids' logits only, the rest
    # are -inf (a trimmed head, FR-Spec; BPE ids follow the merges, roughly by frequency)
    head_tokens: int = 0
    delegate_adapter: bool = True  # adapter matmuls inside XNNPACK (weights still in the .ptd)
    role: str = "drafter"  # target: no LoRA, every position's logits
    # a second, one-token method whose attention reads only the first decode_window cache slots
    # (used while the context fits; 0 = none; llama-family layers only). The same bits as forward's
    decode_window: int = 256

    def __post_init__(self):
        checks = [
            (self.quant in QUANTS, "quant", f"one of {', '.join(QUANTS)}"),
            (16 <= self.max_seq <= 32768, "max_seq", "in 16..32768"),
            (self.group_size in GROUP_SIZES, "group_size",
             "one of 16, 32, 64, 128, 256 or 0 (per output channel)"),
            (self.weight_qparams in WEIGHT_QPARAMS, "weight_qparams", f"one of {', '.join(WEIGHT_QPARAMS)}"),
            (1 <= self.lora_rank <= 256, "lora_rank", "in 1..256"),
            (self.lora_alpha > 0, "lora_alpha", "> 0"),
            (len(self.lora_targets) > 0, "lora_targets", "non-empty"),
            (self.head_width >= 8, "head_width", ">= 8"),
            (self.specvocab_k >= 0, "specvocab_k", ">= 0 (0 = the full LM head)"),
            (self.role in ROLES, "role", f"one of {', '.join(ROLES)}"),
            (self.decode_window >= 0 and self.decode_window % 64 == 0, "decode_window",
             "a multiple of 64 (0 = no one-token method)"),
            (not self.gguf_weights or (self.quant == "8da4w" and self.group_size == 32), "gguf_weights",
             "used with 8da4w in groups of 32 only"),
            (self.role == "drafter" or self.specvocab_k == 0, "specvocab_k",
             "0 for a target (verification needs every logit)"),
            (self.head_tokens >= 0 and (self.head_tokens == 0 or (self.role == "drafter" and not self.specvocab_k)),
             "head_tokens", ">= 0, and 0 for a target or with SpecVocab (0 = the full LM head)"),
        ]
        for ok, name, want in checks:
            if not ok:
                raise OmniDraftError(f"ExportConfig.{name} must be {want}, got {getattr(self, name)!r}")


def scheme_fields(scheme: str) -> dict:
    """ExportConfig's weight fields for a scheme name, ``fp32`` | ``8da8w`` | ``8da4w`` (4-bit,
    groups of 32) with optional ``-g<size>`` (groups of that size) or ``-pc`` (one scale per output
    channel), ``-hqq`` (HQQ-optimised scales) and ``-mix`` (the LM head and the MLPs' down
    projections at 8 bits): e.g. ``8da4w-pc-hqq-mix``; or ``8da4w-gguf`` (the model's GGUF's own
    4-bit weights, the rest at 8 bits). Program folders are named by the scheme."""
    quant, *mods = scheme.split("-")
    if quant in QUANTS and (quant == "8da4w" or not mods) and all(m in SCHEME_MODIFIERS for m in mods) \
            and ("gguf" not in mods or mods == ["gguf"]):
        return {"quant": quant, "group_size": 32, "weight_qparams": "affine", "eight_bit": (), "gguf_weights": False,
                **dict(SCHEME_MODIFIERS[m] for m in mods)}
    raise OmniDraftError(f"unknown weight scheme {scheme!r}",
                         "use fp32, 8da8w, 8da4w[-g16|-g32|-g64|-g128|-g256|-pc][-hqq][-mix] or 8da4w-gguf")


def with_adapter(lm: torch.nn.Module, cfg: ExportConfig):
    """A peft model with zero-initialised LoRA (B = 0: the base model's outputs) on ``lm``."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(lm, LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha,
                                         target_modules=list(cfg.lora_targets), lora_dropout=0.0))


def quantize(lm: torch.nn.Module, quant: str, group_size: int, skip: tuple[str, ...] = (),
             qparams: str = "affine", eight_bit: tuple[str, ...] = (), exact: dict[str, Blocks] | None = None) -> None:
    """In place: dynamic int8 activations with int8 (per channel) or int4 (per group of
    ``group_size`` inputs, or per channel with 0) weights on every base Linear, 4-bit scales chosen
    by ``qparams``, int8 ones on Linears whose name ends with one of ``eight_bit``; LoRA and head
    Linears stay fp32 (they live in the .ptd), as do modules whose name ends with one of ``skip``.
    With ``exact`` (gguf_q4.four_bit_linears): those Linears run their GGUF codes and scales
    (``BlockLinear``) and every other base Linear is int8. The token embedding is int8 per row
    (embedding8.py) in every scheme but fp32. What stays plain is then copied out of the file the
    model was mapped from (mapped.py)."""
    if quant == "fp32":
        return
    embeddings_at_8_bits(lm)  # a tied LM head keeps its own reference to the fp32 weight until quantised
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quantize_.workflows.intx.intx_choose_qparams_algorithm import (
        IntxChooseQParamsAlgorithm)

    def base_linear(m: torch.nn.Module, fqn: str) -> bool:
        return isinstance(m, torch.nn.Linear) and not is_adapter_param(fqn + ".") and not fqn.endswith(skip)

    four = quant == "8da4w"
    int8 = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    int4 = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(group_size) if group_size else PerAxis(0),
        intx_choose_qparams_algorithm=IntxChooseQParamsAlgorithm.HQQ_SCALE_ONLY if qparams == "hqq"
        else IntxChooseQParamsAlgorithm.AFFINE)
    def four_bit(m: torch.nn.Module, fqn: str) -> bool:  # a row that splits into whole groups
        return not fqn.endswith(eight_bit) and (group_size == 0 or m.weight.shape[1] % group_size == 0)

    def apply(config, chosen) -> None:  # a layer at a time, the file's pages of what it replaced handed back
        in_turn(lm, lambda selected: quantize_(lm, config, filter_fn=selected), chosen)

    with torch.no_grad(), rows_at_a_time():
        if exact is not None:
            found = attach(lm, exact)
            apply(int4, lambda m, fqn: fqn in found)
            apply(int8, lambda m, fqn: base_linear(m, fqn) and fqn not in found
                  and not fqn.endswith(".sums"))  # the block sums' 0/1 weights stay exact
            load_codes(lm, found)
        elif not four:
            apply(int8, base_linear)
        else:
            if eight_bit:
                apply(int8, lambda m, fqn: base_linear(m, fqn) and fqn.endswith(eight_bit))
            apply(int4, lambda m, fqn: base_linear(m, fqn) and four_bit(m, fqn))
    own_memory(lm)  # the file the fp32 weights were mapped from is let go (export/mapped.py)


def _adapter_free_partitioner():
    """XNNPACK, except for ops that read a LoRA/head weight: XNNPACK keys the constants it owns
    by content hash, so weights meant to be swapped by name must run outside the delegate."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    partitioner = XnnpackPartitioner()
    for cfg in partitioner.target_partitioner_configs.values():
        cfg.check_constraints = _skip_adapter_ops(cfg.check_constraints)
    return partitioner


def _skip_adapter_ops(check: Callable) -> Callable:
    memo: dict = {}  # the graph signature's placeholder -> FQN map, per exported program

    def checked(node: torch.fx.Node, ep) -> bool:
        if memo.get("ep") is not ep:
            memo.update(ep=ep, names={**ep.graph_signature.inputs_to_parameters,
                                      **ep.graph_signature.inputs_to_buffers})
        names = memo["names"]

        def from_adapter(a: torch.fx.Node, depth: int = 0) -> bool:
            if a.op == "placeholder":
                return is_adapter_param(names.get(a.name, ""))
            # a weight reached through a transpose/view of the parameter
            return (a.op == "call_function" and depth < 3 and len(a.all_input_nodes) == 1
                    and from_adapter(a.all_input_nodes[0], depth + 1))

        return not any(from_adapter(a) for a in node.all_input_nodes) and check(node, ep)

    return checked


def lower(program: DraftProgram, out_dir: Path, cfg: ExportConfig,
          log: Callable[[str], None] = print) -> ProgramInfo:
    """torch.export + XNNPACK lowering of ``program``; writes program.pte, base.ptd, program.json."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import (EdgeCompileConfig, EdgeProgramManager, ExecutorchBackendConfig,
                                 to_edge_transform_and_lower)
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    adapter = {n: t for n, t in [*program.named_parameters(), *program.named_buffers()] if is_adapter_param(n)}
    real = {n: t.detach().clone() for n, t in adapter.items()}  # the zero adapter, for base.ptd
    if cfg.delegate_adapter:
        _make_distinct(adapter)  # content keys must tell the tensors apart (B = 0 everywhere otherwise)
    try:
        window = decode_window(cfg)
        names = ["forward", "decode"] if program.batch_invariant and window else ["forward"]
        # the edge-dialect validity check re-walks every node after each pass: 12% of the lowering
        # on a 6-layer slice of the 0.5B target, skipped as ExecuTorch's own LLM export does
        config = EdgeCompileConfig(_check_ir_validity=False)

        def lower_some(some: list[str]) -> dict:
            methods = {n: _export_method(program, cfg, window if n == "decode" else None, log) for n in some}
            log(f"export: lowering {', '.join(some)} to XNNPACK ({time.perf_counter() - t0:.0f} s so far)")
            partitioner = XnnpackPartitioner() if cfg.delegate_adapter else _adapter_free_partitioner()
            edge = to_edge_transform_and_lower(methods, partitioner=[partitioner], compile_config=config)
            return {n: edge.exported_program(n) for n in some}

        with _shortcuts(), per_channel_int4():
            edge = EdgeProgramManager(lower_methods(names, lower_some), compile_config=config)
            # what the lowering freed goes back before the program is emitted: glibc kept ~0.63 GB
            # of free heap resident on the 0.5B target (2.67 -> 2.04 GiB), and emitting adds to it
            trim()
            by_name = set()  # placeholders read outside the delegate, in any method
            for name in names:
                sig = edge.exported_program(name).graph_signature
                fqns = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
                by_name |= {ph for ph, fqn in fqns.items() if is_adapter_param(fqn)}
            # a target's attention reads every cache slot (masked): its caches start as zeros, not as
            # whatever the arena held; its cache writes (index_put) run in place, not on a copy; its
            # methods read and write one set of caches
            init = [InitializedMutableBufferPass(["kv_k_", "kv_v_"])] if program.batch_invariant else []
            et = edge.to_executorch(ExecutorchBackendConfig(
                external_constants=lambda node: "base" if node.name in by_name else None,
                passes=init, run_reinplace_pass=True, emit_mutable_buffer_names=True,  # device/kv_state.py
                memory_planning_pass=planner(share_mutable_buffers=len(names) > 1)))
        tmp = out_dir / "program.pte.tmp"
        with open(tmp, "wb") as f:  # written piece by piece: et.buffer would join the pieces in one copy (1.8 GB)
            et.write_to_file(f)
        et.write_tensor_data_to_file(str(out_dir))  # base.ptd, with the export-time values
        got = read_ptd_keys(out_dir / "base.ptd")
        in_pte = set(getattr(getattr(et, "_named_data", None), "pte_data", None) or {})
        ptd_keys: dict[str, list] = {}
        for name, t in adapter.items():
            content = _content_key(t) if cfg.delegate_adapter else None
            if content in in_pte:
                raise OmniDraftError(f"export: XNNPACK baked adapter weight {name} into the .pte",
                                     "this program could not swap adapters")
            ptd_keys[name] = [k for k in (name, content) if k in got]
        missing = sorted(n for n, keys in ptd_keys.items() if not keys)
        if missing:  # constant folding can silently fold an adapter weight into the program
            raise OmniDraftError(f"export: {len(missing)} adapter weights did not reach the .ptd "
                                 f"(e.g. {missing[0]})", "this program could not swap adapters")
    finally:  # the caller's module gets its own adapter back, even on failure
        with torch.no_grad():
            for name, t in adapter.items():
                t.copy_(real[name])
    write_ptd(*ptd_entries(real, ptd_keys), out_dir / "base.ptd")
    tmp.replace(out_dir / "program.pte")
    info = ProgramInfo(
        program_id=sha256_file(out_dir / "program.pte")[:16], config=asdict(cfg),
        vocab_size=program.vocab_size, hidden_size=int(program.lm.config.hidden_size),
        max_seq=cfg.max_seq, adapter_keys={n: [list(t.shape), str(t.dtype).removeprefix("torch.")]
                                           for n, t in adapter.items()},
        ptd_keys=ptd_keys, decode_window=window if "decode" in names else 0,
        max_rows=max_rows(cfg.max_seq) if program.all_logits else 0, max_width=max_width(cfg.max_seq),
        export_seconds=round(time.perf_counter() - t0, 1),
        pte_bytes=(out_dir / "program.pte").stat().st_size, versions=_versions(), eos_ids=_eos_ids(program.lm))
    info.save(out_dir / "program.json")
    n_del = sum(1 for keys in ptd_keys.values() if any(k not in adapter for k in keys))
    log(f"export: wrote {out_dir / 'program.pte'} ({info.pte_bytes / 2**20:.1f} MiB) and base.ptd "
        f"({len(adapter)} adapter tensors, {n_del} read inside XNNPACK) in {info.export_seconds:.0f} s")
    return info


@contextlib.contextmanager
def _shortcuts() -> Iterator[None]:
    """The lowering with less work, the program unchanged (each module's test compares bytes):
    fake propagation through torchao's quantisation ops is a lookup (quant_fakes.py), nodes'
    provenance records are shared, not deep-copied, by each pass (provenance.py) and XNNPACK runs
    on a partition only the passes that can change it (xnnpack_passes.py). The methods are then
    lowered on both cores (lower_methods: two_methods.py, or two_cores.py for one method)."""
    with shape_only_quant_ops(), shared_provenance(), applicable_passes():
        yield


def max_rows(max_seq: int) -> int:
    """The most positions' logits one call of a target program returns (ExecuTorch plans memory
    for a dynamic shape's bound: the logits buffer is rows x vocab fp32, 622 MB at 1,024 rows of
    151,936 in every loaded copy, 39 MB at ROWS)."""
    return min(ROWS, max_seq)


def max_width(max_seq: int) -> int:
    """The most tokens one call of a program reads. ExecuTorch sizes a program's planned
    activations for a dynamic shape's bound, zero-filled at load and so resident in every loaded
    copy: the drafter's were 20.8 MB at 1,024 tokens, 4.5 MB at 256. Reading a prompt in pieces of
    256 is as fast as at once (1,000 tokens, AMD EPYC: the 0.5B target 629-641 vs 601-608 tokens/s,
    the drafter 1,168 vs 1,102-1,126)."""
    return min(WIDTH, max_seq)


def decode_window(cfg: ExportConfig) -> int:
    """The slots a program's one-token method reads (0: no such method)."""
    return cfg.decode_window if 0 < cfg.decode_window < cfg.max_seq else 0


def _export_method(program: DraftProgram, cfg: ExportConfig, window: int | None,
                   log: Callable[[str], None]) -> "torch.export.ExportedProgram":
    """torch.export (strict) of ``program``: ``forward`` with a dynamic token count T (and row
    count R for a target) and attention over the whole cache; with ``window``, the one-token
    method (static shapes, attention over the first ``window`` slots). Adapter parameters are
    tagged so XNNPACK writes them to the .ptd, not the .pte."""
    program.window = window
    ids = torch.zeros(1, 1 if window else 4, dtype=torch.long)  # [1, T]
    pos = torch.zeros(1, dtype=torch.long)  # [1]
    args, dims = (ids, pos), ({1: torch.export.Dim("T", min=1, max=max_width(cfg.max_seq))}, None)
    if program.all_logits:  # rows [R]: which of the T positions' logits to return
        args = (*args, torch.tensor([0]) if window else torch.tensor([2, 3]))
        dims = (*dims, {0: torch.export.Dim("R", min=1, max=max_rows(cfg.max_seq))})
    what = f"its one-token method (first {window} slots)" if window else f"max_seq {cfg.max_seq}"
    log(f"export: torch.export (strict) of {cfg.drafter} [{cfg.quant}], {what}")
    try:
        with torch.no_grad():
            ep = torch.export.export(program, args, dynamic_shapes=None if window else dims, strict=True)
    finally:
        program.window = None
    fqns = {**ep.graph_signature.inputs_to_parameters, **ep.graph_signature.inputs_to_buffers}
    for node in ep.graph.nodes:  # XNNPACK writes constants tagged so to the .ptd, not the .pte
        if node.op == "placeholder" and is_adapter_param(fqns.get(node.name, "")):
            node.meta.setdefault("custom", {})["delegate_constant_tag"] = "base"
    return ep


def _make_distinct(tensors: dict[str, torch.Tensor]) -> None:
    """In place: distinct random values in every floating tensor (export time only)."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in tensors.values():
            if t.is_floating_point() and t.numel():
                t.copy_(torch.randn(t.shape, generator=gen, dtype=t.dtype) * 0.02)


def _content_key(t: torch.Tensor) -> str:
    """The key XNNPACK gives a constant: sha256 of its bytes (fp32, row-major)."""
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()


def export_drafter(lm: torch.nn.Module, out_dir: Path, cfg: ExportConfig,
                   log: Callable[[str], None] = print, ranker: torch.nn.Module | None = None) -> ProgramInfo:
    """Attach a zero LoRA adapter and an untrained acceptance head to ``lm`` (fp32 HF causal LM;
    modified in place), quantise the base weights, and lower the result to ``out_dir``.
    With ``cfg.specvocab_k``: ``ranker`` (a trained SpecVocabHead; default its SVD initialisation)
    ranks the vocabulary inside the program."""
    from omnidraft.models.acceptance import AcceptanceHead

    if cfg.specvocab_k and ranker is None:
        from omnidraft.models.specvocab import SpecVocabHead

        ranker = SpecVocabHead(lm.get_output_embeddings().weight)
    if cfg.specvocab_k and lm.config.tie_word_embeddings:  # the gathered rows need their own copy
        lm.lm_head.weight = torch.nn.Parameter(lm.lm_head.weight.detach().clone())
    peft_model = with_adapter(lm, cfg)
    head = AcceptanceHead(lm.config.hidden_size, cfg.head_width)
    program = DraftProgram(peft_model.get_base_model(), head, cfg.max_seq,
                           ranker if cfg.specvocab_k else None, cfg.specvocab_k,
                           batch_invariant=has_llama_layers(lm), head_tokens=cfg.head_tokens)  # attention inside XNNPACK
    # base Linears (LoRA's base_layer, lm_head unless SpecVocab gathers its rows)
    quantize(program, cfg.quant, cfg.group_size, skip=("lm_head",) if cfg.specvocab_k else (),
             qparams=cfg.weight_qparams, eight_bit=cfg.eight_bit, exact=_gguf_blocks(lm, cfg))
    return lower(program, out_dir, cfg, log)


def export_target(lm: torch.nn.Module, out_dir: Path, cfg: ExportConfig,
                  log: Callable[[str], None] = print) -> ProgramInfo:
    """``lm`` (fp32 HF causal LM) as a verifying program: base weights quantised, no LoRA, the
    logits of the positions asked for, batch-invariant (a position's logits do not depend on the
    call's width, so verifying equals decoding one token at a time). An untrained acceptance
    head rides along, so drafter and target programs run through the same ``ExecuTorchLM``."""
    from omnidraft.models.acceptance import AcceptanceHead

    if cfg.role != "target":
        raise OmniDraftError("export_target needs ExportConfig(role='target')")
    program = DraftProgram(lm, AcceptanceHead(lm.config.hidden_size, cfg.head_width), cfg.max_seq,
                           all_logits=True, batch_invariant=True)
    quantize(program, cfg.quant, cfg.group_size, qparams=cfg.weight_qparams, eight_bit=cfg.eight_bit,
             exact=_gguf_blocks(lm, cfg))
    return lower(program, out_dir, cfg, log)


def _gguf_blocks(lm: torch.nn.Module, cfg: ExportConfig) -> dict[str, Blocks] | None:
    return four_bit_linears(gguf_file(cfg.drafter), lm.config.model_type) if cfg.gguf_weights else None


def _eos_ids(lm: torch.nn.Module) -> list[int]:
    from omnidraft.decode.text import generation_eos_ids

    return sorted(generation_eos_ids(getattr(lm, "generation_config", None)))


def _versions() -> dict:
    from importlib.metadata import version

    out = {}
    for pkg in ("torch", "executorch", "torchao", "transformers", "peft"):
        try:
            out[pkg] = version(pkg)
        except Exception:  # noqa: BLE001 - recorded only
            out[pkg] = None
    return out
