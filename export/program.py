"""A drafter or target as one exportable module: a static KV cache in registered buffers and
``forward(ids, pos)`` that serves prefill, decode and verification, returning the logits (of the
last position for a drafter, of every position for a target: what verifying a proposal needs),
the last hidden state and the acceptance head's P(accept) for the greedy next token.

Llama-family models (llama, qwen2), drafters and targets, run a layer loop written for XNNPACK
(``_llama_layers``: no reshape with a symbolic size, RMSNorm's mean over a 4-D tensor's inner
dims, RoPE's rotate-half as a fixed matmul) with batch-invariant masked attention inside the
delegate (``_masked_sdpa``). Other architectures run the Hugging Face layers on ExecuTorch's LLM
custom ops (``llama::update_cache`` writes the new keys and values into the cache in place,
``llama::custom_sdpa`` attends only to positions <= the query's).
Knows the Hugging Face model, its (peft) LoRA layers and the acceptance head; nothing about
lowering, files or the decode loop.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from omnidraft.errors import OmniDraftError
from omnidraft.models.lm import cache_kwarg

# Parameter names that belong to the per-target part of the program (LoRA and head): they stay
# outside the XNNPACK partition and go to the swappable .ptd file.
ADAPTER_MARKERS = ("lora_A", "lora_B", "accept_head.")
ATTENTION = "omnidraft_et_sdpa"
LLAMA_FAMILY = ("llama", "qwen2")  # decoder layers the XNNPACK-shaped loop reproduces exactly


def is_adapter_param(name: str) -> bool:
    return any(m in name for m in ADAPTER_MARKERS)


def has_llama_layers(lm: nn.Module) -> bool:
    """Whether ``lm``'s decoder layers are the ones ``DraftProgram``'s XNNPACK-shaped loop
    reproduces (llama / qwen2 without q/k norms); only those take ``batch_invariant``."""
    config = lm.config.get_text_config()
    return config.model_type in LLAMA_FAMILY and not hasattr(lm.model.layers[0].self_attn, "q_norm")


def _et_attention(module, query, key_cache, value_cache, attention_mask, scaling=None, dropout=0.0,
                  et_start_pos=None, **kwargs):
    """HF attention interface on the custom op. query [B, Hq, T, D]; key/value_cache
    [B, max_seq, Hkv, D] (what StaticKV.update returns). Returns ([B, T, Hq, D], None)."""
    out = torch.ops.llama.custom_sdpa(query.transpose(1, 2), key_cache, value_cache, et_start_pos,
                                      None, 0.0, True, scaling)
    return out, None


def _register_attention() -> None:
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - registers llama::*
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _et_attention)


def _causal_mask(positions: torch.Tensor, slots: int) -> torch.Tensor:
    """[T, S] additive mask: 0 where a cache slot is at or before the query's position, else -inf."""
    return torch.where(torch.arange(slots).unsqueeze(0) <= positions.unsqueeze(1), 0.0, float("-inf"))


def _masked_sdpa(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, mask: torch.Tensor,
                 scaling: float) -> torch.Tensor:
    """Causal attention of q [1, T, Hq, D] over the whole static cache in head-major layout,
    kc [Hkv, D, S] (keys transposed) and vc [Hkv, S, D], with ``mask`` [T, 1, S] from
    ``_causal_mask`` (made once per call: a per-layer reshape would run outside the delegate and split it). Both products read the caches as they lie (no copy of the cache), every
    query row is a separate row of fixed length S in each product and in the softmax, so a
    position gets the same numbers bit for bit whether it is computed alone or inside a wider call
    (custom_sdpa takes another path for T > 1). Returns [1, T, Hq, D]."""
    n_kv, d, slots = kc.shape
    group = q.shape[2] // n_kv
    # .contiguous() before each merging reshape keeps its size inferred (-1) in the exported graph,
    # which XNNPACK's reshape takes; a computed symbolic size would split the delegate around it
    qg = q.reshape(-1, n_kv, group, d).permute(1, 0, 2, 3).contiguous().reshape(n_kv, -1, d)  # [Hkv, T*g, D]
    scores = torch.bmm(qg, kc) * scaling  # [Hkv, T*g, S]
    scores = scores.reshape(n_kv, -1, group, slots) + mask  # [Hkv, T, g, S]
    probs = torch.softmax(scores, dim=-1).reshape(n_kv, -1, slots)  # [Hkv, T*g, S]
    o = torch.bmm(probs, vc)  # [Hkv, T*g, D]
    return o.reshape(n_kv, -1, group, d).permute(1, 0, 2, 3).contiguous().reshape(1, -1, n_kv * group, d)


def _rms_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Llama's RMSNorm of x [1, T, H] with the mean taken over a [T, 1, 1, H] view (the only
    mean XNNPACK runs). Returns [1, T, H]."""
    size = x.shape[-1]
    x4 = x.reshape(-1, 1, 1, size)  # [T, 1, 1, H]
    var = (x4 * x4).mean((2, 3), keepdim=True)  # [T, 1, 1, 1]
    return (x4 * torch.rsqrt(var + norm.variance_epsilon)).reshape(1, -1, size) * norm.weight


class StaticKV(nn.Module):
    """Per-layer key/value buffers, updated in place at ``start_pos``: [1, max_seq, Hkv, D] (the
    custom ops' layout), or head-major with ``head_major`` (keys [Hkv, D, max_seq], values
    [Hkv, max_seq, D]: what ``_masked_sdpa`` multiplies by without copying). Stands in for the HF
    cache object (the model only calls ``update``, custom-op layout only)."""

    def __init__(self, n_layers: int, max_seq: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 head_major: bool = False):
        super().__init__()
        self.n_layers = n_layers
        k_shape = (kv_heads, head_dim, max_seq) if head_major else (1, max_seq, kv_heads, head_dim)
        v_shape = (kv_heads, max_seq, head_dim) if head_major else (1, max_seq, kv_heads, head_dim)
        for i in range(n_layers):
            self.register_buffer(f"k_{i}", torch.zeros(k_shape, dtype=dtype), persistent=False)
            self.register_buffer(f"v_{i}", torch.zeros(v_shape, dtype=dtype), persistent=False)
        self.start_pos = 0  # set by the program before each forward (a symbolic int when exported)

    def update(self, key, value, layer_idx, *args, **kwargs):
        """key, value: [1, Hkv, T, D] -> the layer's whole caches [1, max_seq, Hkv, D]."""
        kc, vc = getattr(self, f"k_{layer_idx}"), getattr(self, f"v_{layer_idx}")
        torch.ops.llama.update_cache(key.transpose(1, 2), kc, self.start_pos)
        torch.ops.llama.update_cache(value.transpose(1, 2), vc, self.start_pos)
        return kc, vc

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.start_pos


class DraftProgram(nn.Module):
    """``forward(ids [1, T] int64, pos [1] int64)`` writes T tokens into the cache at positions
    pos..pos+T-1 and returns (logits [1, V] float32, hidden [1, H] float32, accept [1] float32)
    for the last of them. With ``all_logits`` (a target) it takes a third input ``rows`` [R]
    int64, indices into the T positions of this call, and returns their logits [R, V]
    (verification: every position of the proposal; prefill: the last one). Positions past
    ``pos`` are never attended to, so rolling back is just calling with a smaller ``pos``.

    ``batch_invariant`` (llama-family layers only): attention as fixed-length masked products
    (``_masked_sdpa``) instead of ``llama::custom_sdpa``, whose multi-token path rounds
    differently from its one-token path; per-token int8 activation quantisation turns those
    last-bit differences into logit differences of ~0.5, so a quantised target's verification
    would disagree with its own one-token decoding at near-ties. With it, a position's logits
    are the same bits at any call width. Drafters with such layers take it too: their attention
    then stays inside the XNNPACK delegate, where custom_sdpa's one-token cost grew with the
    context (docs/programs.md). ``window`` (set while exporting a one-token method): attention
    reads only the first ``window`` slots. An unread slot is one whose mask is -inf, whose
    probability is an exact 0 and whose product terms come after the read ones, so a position's
    logits are the same bits at any window that holds it (tested bit for bit).

    ``lm``: a Hugging Face causal LM, optionally with peft LoRA layers injected (pass
    ``peft_model.get_base_model()``); its attention is switched to the custom op in place.
    ``head``: an AcceptanceHead (weights in the .ptd). ``ranker``: a SpecVocabHead; then exact
    logits are computed only on its top ``k_vocab`` candidates and every other logit is -inf
    (the LM head then stays fp32: rows are gathered). ``head_tokens`` > 0 (a drafter): the LM
    head keeps the rows of the first ``head_tokens`` token ids only and every other logit is -inf
    (a trimmed head, FR-Spec: a BPE vocabulary's ids follow its merges, roughly by frequency);
    ``lm.lm_head`` is replaced in place by the trimmed Linear, which is quantised like the full one.
    """

    def __init__(self, lm: nn.Module, head: nn.Module, max_seq: int, ranker: nn.Module | None = None,
                 k_vocab: int = 2048, all_logits: bool = False, batch_invariant: bool = False,
                 head_tokens: int = 0):
        super().__init__()
        self.batch_invariant = batch_invariant
        if all_logits and ranker is not None:
            raise OmniDraftError("a SpecVocab LM head computes one position's candidates; it cannot "
                                 "return every position's logits")
        self.vocab_size = int(lm.config.get_text_config().vocab_size)
        if head_tokens and (all_logits or ranker is not None or not 0 < head_tokens < self.vocab_size):
            raise OmniDraftError(f"a trimmed LM head needs a drafter with its full head and 0 < head_tokens < "
                                 f"{self.vocab_size}, got {head_tokens}")
        self.head_tokens = head_tokens
        if head_tokens:  # the first head_tokens rows, untied from the embedding
            full = lm.get_output_embeddings().weight  # [V, H]
            lm.lm_head = nn.Linear(full.shape[1], head_tokens, bias=False)
            lm.lm_head.weight = nn.Parameter(full.detach()[:head_tokens].clone())  # [N, H]
        self.all_logits = all_logits
        _register_attention()
        self.lm = lm.eval()
        self._cache_kw = cache_kwarg(lm.model)
        self.lm.config._attn_implementation = ATTENTION
        self.accept_head = head.eval()
        self.specvocab_ranker = ranker
        self.k_vocab = k_vocab
        self.max_seq = max_seq
        self.window: int | None = None  # batch-invariant only: the slots attention reads (per method)
        config = lm.config.get_text_config()
        window = getattr(config, "sliding_window", None)
        if window and max_seq > window and ("sliding_attention" in (getattr(config, "layer_types", None) or [])
                                             or getattr(config, "use_sliding_window", False)):
            raise OmniDraftError(f"{config.model_type}: sliding-window attention (window {window}) is not "
                                 f"exportable with max_seq {max_seq}", f"use --max-seq <= {window}")
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.kv = StaticKV(config.num_hidden_layers, max_seq, config.num_key_value_heads, head_dim,
                           next(lm.parameters()).dtype, head_major=batch_invariant)
        self.n_heads, self.n_kv, self.head_dim = config.num_attention_heads, config.num_key_value_heads, head_dim
        rot = None  # [D, D]: rotate_half(x) == F.linear(x, rot); None: the Hugging Face layers
        if has_llama_layers(lm):
            half = head_dim // 2
            rot = torch.zeros(head_dim, head_dim)
            rot[torch.arange(half), torch.arange(half) + half] = -1.0
            rot[torch.arange(half) + half, torch.arange(half)] = 1.0
        self.register_buffer("rot", rot, persistent=False)
        if batch_invariant and rot is None:
            raise OmniDraftError(f"{config.model_type}: a batch-invariant program needs the llama/qwen2 "
                                 "layer loop", "run it on transformers: --target-runtime eager")

    def _llama_layers(self, ids: torch.Tensor, positions: torch.Tensor, start) -> torch.Tensor:
        """The decoder on ids [1, T] at positions [1, T] -> final-norm hidden states [1, T, H].
        The same arithmetic as the Hugging Face layers, in shapes XNNPACK takes whole."""
        model = self.lm.model
        h = model.embed_tokens(ids)  # [1, T, H]
        cos, sin = model.rotary_emb(h, positions)  # [1, T, D] each
        cos = cos.reshape(1, -1, 1, self.head_dim)  # [1, T, 1, D]
        sin = sin.reshape(1, -1, 1, self.head_dim)
        slots = positions[0]  # [T]: the cache slots this call writes
        seen = self.window or self.max_seq  # the cache slots attention reads: the first `seen`
        mask = _causal_mask(slots, seen).unsqueeze(1) if self.batch_invariant else None  # [T, 1, seen]
        for i, layer in enumerate(model.layers):
            attn = layer.self_attn
            x = _rms_norm(layer.input_layernorm, h)
            q = attn.q_proj(x).reshape(1, -1, self.n_heads, self.head_dim)  # [1, T, Hq, D]
            k = attn.k_proj(x).reshape(1, -1, self.n_kv, self.head_dim)  # [1, T, Hkv, D]
            v = attn.v_proj(x).reshape(1, -1, self.n_kv, self.head_dim)
            q = q * cos + F.linear(q, self.rot) * sin
            k = k * cos + F.linear(k, self.rot) * sin
            kc, vc = getattr(self.kv, f"k_{i}"), getattr(self.kv, f"v_{i}")
            if self.batch_invariant:  # kc [Hkv, D, max_seq], vc [Hkv, max_seq, D]; index_put in place
                # (reshape, not k[0]: the layout change stays inside the projections' delegate)
                kc[:, :, slots] = k.reshape(-1, self.n_kv, self.head_dim).permute(1, 2, 0)  # [Hkv, D, T]
                vc[:, slots] = v.reshape(-1, self.n_kv, self.head_dim).permute(1, 0, 2)  # [Hkv, T, D]
                if seen < self.max_seq:
                    kc, vc = kc[:, :, :seen], vc[:, :seen]
                o = _masked_sdpa(q, kc, vc, mask, attn.scaling)  # [1, T, Hq, D]
            else:  # kc, vc [1, max_seq, Hkv, D]
                torch.ops.llama.update_cache(k, kc, start)
                torch.ops.llama.update_cache(v, vc, start)
                o = torch.ops.llama.custom_sdpa(q, kc, vc, start, None, 0.0, True, attn.scaling)
            h = h + attn.o_proj(o.reshape(1, -1, self.n_heads * self.head_dim))
            h = h + layer.mlp(_rms_norm(layer.post_attention_layernorm, h))
        return _rms_norm(model.norm, h)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, rows: torch.Tensor | None = None):
        start = pos[0].item()
        torch._check_is_size(start)
        torch._check(start + ids.shape[1] <= (self.window or self.max_seq))
        self.kv.start_pos = start
        positions = (torch.arange(ids.shape[1]) + pos[0]).unsqueeze(0)  # [1, T]
        if self.rot is not None:
            states = self._llama_layers(ids, positions, start)  # [1, T, H], after the final norm
        else:
            states = self.lm.model(input_ids=ids, position_ids=positions, **{self._cache_kw: self.kv},
                                   use_cache=True, et_start_pos=start).last_hidden_state  # [1, T, H]
        hidden = states[:, -1, :]  # [1, H]
        if self.all_logits:
            logits = self.lm.lm_head(states[0].index_select(0, rows)).float()  # [R, V]
        elif self.head_tokens:
            trimmed = self.lm.lm_head(hidden).float()  # [1, N]
            rest = torch.full((1, self.vocab_size - self.head_tokens), float("-inf"))
            logits = torch.cat([trimmed, rest], dim=1)  # [1, V]
        elif self.specvocab_ranker is None:
            logits = self.lm.lm_head(hidden).float()  # [1, V]
        else:
            W = self.lm.lm_head.weight  # [V, H]
            cand = torch.topk(self.specvocab_ranker(hidden), self.k_vocab, dim=-1).indices  # [1, k]
            exact = W.index_select(0, cand[0]) @ hidden[0]  # [k]
            logits = torch.full((1, W.shape[0]), float("-inf")).scatter(1, cand, exact.unsqueeze(0).float())
        top = logits[-1:].argmax(-1)  # [1]
        emb = self.lm.model.embed_tokens(top)  # [1, H]
        score = self.accept_head(hidden.float(), emb.float())  # [1]
        accept = torch.sigmoid(score + self.accept_head.logit_shift)  # [1]
        return logits, hidden.float(), accept
