"""SpecVocab for the drafter's LM head: a low-rank ranking picks the top-k candidate tokens and
exact logits are computed only for them.

ranking(h) = (h W_down) W_vocab^T with W_down [H, r], W_vocab [V, r], r = H / 16, initialised
from the truncated SVD of the LM head (so it ranks well before any training) and trainable by
distillation toward the full head (``ranking_loss``, weight lambda = 0.1 beside the drafter's
own loss). Non-candidates get -inf, so greedy picks and sampling stay inside the candidates.
Knows one HF causal LM's body and head; nothing about decoding.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from omnidraft.models.lm import cache_kwarg


class SpecVocabHead(nn.Module):
    """The ranking half: [N, H] hidden -> [N, V] approximate logits, in rank r."""

    def __init__(self, lm_head_weight: torch.Tensor, rank: int | None = None):
        super().__init__()
        V, H = lm_head_weight.shape
        r = rank or max(8, H // 16)
        if not 1 <= r <= min(V, H):
            raise ValueError(f"SpecVocab rank must be in 1..{min(V, H)}, got {r}")
        with torch.no_grad():
            U, S, Vh = torch.linalg.svd(lm_head_weight.float(), full_matrices=False)
        self.down = nn.Parameter(Vh[:r].T.contiguous())  # [H, r]
        self.vocab = nn.Parameter((U[:, :r] * S[:r]).contiguous())  # [V, r]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return (hidden @ self.down) @ self.vocab.T  # [N, V]


def load_ranker(path: str, lm_head_weight: torch.Tensor) -> SpecVocabHead:
    """A trained ranking (safetensors with ``down`` and ``vocab``) over ``lm_head_weight`` [V, H]."""
    from safetensors.torch import load_file

    state = load_file(path)
    ranker = SpecVocabHead(lm_head_weight, rank=state["down"].shape[1])
    ranker.load_state_dict(state)
    return ranker


def ranking_loss(rank_logits: torch.Tensor, full_logits: torch.Tensor, lam: float = 0.1) -> torch.Tensor:
    """lambda * KL(softmax(full) || softmax(ranking)), mean over rows. Both [N, V]; the full
    head's logits are the (detached) teacher."""
    p = torch.softmax(full_logits.detach().float(), -1)
    return lam * (p * (torch.log_softmax(full_logits.detach().float(), -1)
                       - torch.log_softmax(rank_logits.float(), -1))).sum(-1).mean()


class SpecVocabLM(nn.Module):
    """Wraps an HF causal LM: the body runs as usual, the LM head only on ``k`` candidates.

    Drop-in for runtime.CausalLM (same forward keywords; ``.logits`` is [1, n, V] with -inf
    outside each row's candidates).
    """

    def __init__(self, model: nn.Module, k: int = 2048, rank: int | None = None):
        super().__init__()
        self.inner = model
        self.k = k
        self.ranker = SpecVocabHead(model.get_output_embeddings().weight, rank)
        self._cache_kw = cache_kwarg(model.model)

    @property
    def config(self):
        return self.inner.config

    @property
    def generation_config(self):
        return self.inner.generation_config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def get_input_embeddings(self):
        return self.inner.get_input_embeddings()

    @property
    def model(self):
        return self.inner.model

    def sparse_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[n, H] -> [n, V]: exact logits on each row's top-k ranked ids, -inf elsewhere."""
        W = self.inner.get_output_embeddings().weight  # [V, H]
        cand = torch.topk(self.ranker(hidden), min(self.k, W.shape[0]), dim=-1, sorted=False).indices  # [n, k]
        if hidden.shape[0] <= 8:  # decode: a matrix-vector product per row on the gathered rows
            exact = torch.stack([W.index_select(0, c) @ h for c, h in zip(cand, hidden)])  # [n, k]
        else:
            exact = torch.einsum("nh,nkh->nk", hidden, W[cand])  # [n, k]
        out = torch.full((hidden.shape[0], W.shape[0]), float("-inf"), dtype=exact.dtype)
        out.scatter_(1, cand, exact)
        return out

    def forward(self, input_ids=None, position_ids=None, cache=None, use_cache=True,
                output_hidden_states=False, logits_to_keep=0, **kw):
        body = self.inner.model(input_ids=input_ids, position_ids=position_ids,
                                **{self._cache_kw: cache}, use_cache=use_cache, **kw)
        h = body.last_hidden_state  # [1, n, H]
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        logits = self.sparse_logits(h[0]).unsqueeze(0)  # [1, n', V]
        hidden_states = (body.last_hidden_state,) if output_hidden_states else None
        return SimpleNamespace(logits=logits, hidden_states=hidden_states, cache=cache)  # updated in place


def pretrain_ranker(ranker: SpecVocabHead, lm_head_weight: torch.Tensor, hidden: torch.Tensor, *,
                    steps: int = 200, batch: int = 256, lr: float = 3e-3, seed: int = 0,
                    progress=None) -> list[float]:
    """Offline distillation of the ranking toward the full head on drafter hidden states
    ``hidden`` [N, H] (from any text: no target needed). Returns the loss per step."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(ranker.parameters(), lr=lr, weight_decay=0.0)
    W = lm_head_weight.detach().float()
    losses = []
    for step in range(steps):
        idx = torch.randint(0, hidden.shape[0], (min(batch, hidden.shape[0]),), generator=gen)
        h = hidden[idx].float().clone()  # a normal tensor even if made under inference_mode
        with torch.no_grad():
            teacher = h @ W.T  # [b, V]
        loss = ranking_loss(ranker(h), teacher, lam=1.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if progress and step % 20 == 19:
            progress(f"ranker step {step + 1}/{steps}: KL {losses[-1]:.3f}")
    return losses
