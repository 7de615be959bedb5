"""Online distillation of the drafter toward one target (OmniDraft Algorithm 2).

Records from verified generations enter a buffer Q; every ``update_interval`` records the
drafter takes AdamW steps over Q in batches, then Q is cleared. LoRA (peft, rank 32 on
q/k/v/o by default) or full fine-tuning. The model may sit on any device (a GPU for
``omnidraft distill --device cuda``): batches follow its weights, records stay on the CPU. Knows
records, losses and the HF model; nothing about decoding or where records come from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from omnidraft.errors import OmniDraftError
from omnidraft.models.lm import model_device
from omnidraft.train.losses import DIVERGENCES, direct_loss, ngram_approx_kl, ngram_nll
from omnidraft.train.records import Record

LOSSES = ("dm", "dm+ngram", "dm+approx")
# records a step's forward and backward hold at once (autograd keeps every layer's activations for the
# backward). SmolLM2-135M fp32 with LoRA, 4 steps of 8 logged records (182 tokens each on average), AMD
# EPYC, one process each: a batch at once peaked at 5.56 GB (the daemon's rounds: 4.6-5.2 GB), in pieces
# of 2 at 2.44 GB, of 1 at 1.71 GB, 7.78 / 7.28 / 6.83 s a step; the same step either way
MICRO = 1


def _means(sums: dict[str, tuple[float, int]]) -> dict[str, float]:
    """{part: its mean over its positions} from {part: (sum, positions)}."""
    return {k: v / n for k, (v, n) in sums.items() if n}


@dataclass(frozen=True)
class TrainConfig:
    method: str = "lora"  # lora | full
    rank: int = 32
    alpha: int = 32
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    lr: float | None = None  # default: 1e-4 for LoRA, 2e-5 for full fine-tuning
    weight_decay: float = 0.01
    batch_size: int = 8
    update_interval: int = 8  # I: records collected between updates
    loss: str = "dm+ngram"  # dm | dm+ngram | dm+approx
    divergence: str = "kl"  # kl (KL(q'||p), the paper's) | fkl | jsd
    ngram_lambda: float | str = 0.2  # a float, or "p" for the target's p(t)
    max_tokens: int = 256
    specvocab_lambda: float = 0.1  # weight of the SpecVocab ranking loss, when a ranker is trained

    def __post_init__(self):
        checks = [
            (self.method in ("lora", "full"), "method", "lora or full"),
            (self.rank >= 1, "rank", ">= 1"),
            (self.batch_size >= 1, "batch_size", ">= 1"),
            (self.update_interval >= 1, "update_interval", ">= 1"),
            (self.loss in LOSSES, "loss", f"one of {LOSSES}"),
            (self.divergence in DIVERGENCES, "divergence", f"one of {DIVERGENCES}"),
            (self.ngram_lambda == "p" or (isinstance(self.ngram_lambda, (int, float))
                                          and self.ngram_lambda >= 0), "ngram_lambda", "'p' or >= 0"),
            (self.max_tokens >= 8, "max_tokens", ">= 8"),
            (self.lr is None or self.lr > 0, "lr", "> 0"),
        ]
        for ok, name, want in checks:
            if not ok:
                raise OmniDraftError(f"TrainConfig.{name} must be {want}, got {getattr(self, name)!r}")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else (1e-4 if self.method == "lora" else 2e-5)


def attach_lora(model: torch.nn.Module, cfg: TrainConfig, name: str = "default"):
    """Wrap an HF causal LM with a fresh LoRA adapter (peft)."""
    from peft import LoraConfig, get_peft_model

    lcfg = LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, target_modules=list(cfg.target_modules),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, lcfg, adapter_name=name)


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The HF causal LM inside ``model``: its peft base model if LoRA-wrapped, else itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


_PER_POSITION = ("draft_ids", "kl_row", "ngram_p", "ngram_first", "ngram_len", "ngram_row",
                 "ngram_first_direct")


def _truncate(rec: Record, max_tokens: int) -> Record:
    """Keep the last ``max_tokens`` positions (the response end; long prompts lose their start)."""
    cut = max(0, rec.length - max_tokens)
    if cut == 0:
        return rec
    fields = {k: (v[cut:] if k in _PER_POSITION else v) for k, v in rec.__dict__.items()}
    fields["gen_start"] = max(1, rec.gen_start - cut)
    return Record(**fields)


def padded_batch(records: list[Record], max_tokens: int) -> tuple[list[Record], torch.Tensor, torch.Tensor]:
    """Truncated records and their right-padded drafter ids [B, L] and attention mask [B, L]."""
    recs = [_truncate(r, max_tokens) for r in records]
    B, L = len(recs), max(r.length for r in recs)
    ids = torch.zeros(B, L, dtype=torch.long)
    mask = torch.zeros(B, L, dtype=torch.long)
    for b, r in enumerate(recs):
        ids[b, : r.length] = r.draft_ids.long()
        mask[b, : r.length] = 1
    return recs, ids, mask


class OnlineTrainer:
    """``model``: an HF causal LM (already wrapped with LoRA for method 'lora')."""

    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, ranker: torch.nn.Module | None = None,
                 between: Callable[[], None] | None = None):
        """``ranker``: a specvocab.SpecVocabHead trained alongside (lambda * KL to the full head).
        ``between``: called between a step's pieces (the daemon's wait while anything generates:
        a piece takes about a second on two cores, a step of eight several)."""
        self.cfg = cfg
        self.between = between
        self.model = model
        self.ranker = ranker
        params = [p for p in model.parameters() if p.requires_grad]
        params += list(ranker.parameters()) if ranker is not None else []
        if not params:
            raise OmniDraftError("the drafter has no trainable parameters",
                                 "attach a LoRA adapter or use method 'full'")
        self.opt = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        self.buffer: list[Record] = []
        self.steps = 0
        self.history: list[dict] = []

    # ------------------------------------------------------------------ loss
    def loss(self, records: list[Record]) -> tuple[torch.Tensor, dict]:
        """Mean loss over the loss positions of ``records`` (every response token counts)."""
        total, sums = self._sums(records)
        count = sums.pop("positions")[1]
        return (total / count if count else total), {**_means(sums), "positions": count}

    def _sums(self, records: list[Record]) -> tuple[torch.Tensor, dict]:
        """The summed loss over the loss positions of ``records`` (each record's terms its own:
        batches of them add up), and each part's (sum, positions), ``positions`` the total."""
        cfg = self.cfg
        recs, ids, mask = padded_batch(records, cfg.max_tokens)
        base, dev = base_model(self.model), model_device(self.model)
        hidden = base.model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state  # [B, L, H]

        kl_b, kl_i, kl_r = [], [], []  # direct-mapped positions and their rows
        ng_b, ng_i, ng_w, ng_rec = [], [], [], []  # n-gram positions
        for b, r in enumerate(recs):
            pos = torch.arange(max(r.gen_start, 1), r.length)
            rows = r.kl_row[pos]
            sel = pos[rows >= 0]
            kl_b += [b] * len(sel)
            kl_i += sel.tolist()
            kl_r += [(b, int(x)) for x in r.kl_row[sel]]
            if cfg.loss != "dm":
                sel = pos[r.ngram_p[pos] > 0]
                ng_b += [b] * len(sel)
                ng_i += sel.tolist()
                ng_w += r.ngram_p[sel].float().tolist()
                ng_rec += [(b, int(i)) for i in sel]
        total = hidden.new_zeros(())
        count = len(kl_i) + len(ng_i)
        parts = {"positions": (0.0, count)}
        if count == 0:
            return total, parts
        if kl_i:
            h = hidden[torch.tensor(kl_b, device=dev), torch.tensor(kl_i, device=dev) - 1]  # the state predicting i
            logq = torch.log_softmax(base.lm_head(h).float(), -1)  # [N, V]
            rids, rprobs, rother = self._rows(recs, kl_r, dev)
            dm = direct_loss(logq, rids, rprobs, rother, cfg.divergence)
            total = total + dm.sum()
            parts["dm"] = (float(dm.detach().sum()), len(kl_i))
            if self.ranker is not None:  # the full head teaches the SpecVocab ranking
                from omnidraft.models.specvocab import ranking_loss

                rl = ranking_loss(self.ranker(h.detach()), base.lm_head(h.detach()), cfg.specvocab_lambda)
                total = total + rl * len(kl_i)
                parts["specvocab"] = (float(rl.detach()) * len(kl_i), len(kl_i))
        if ng_i:
            h = hidden[torch.tensor(ng_b, device=dev), torch.tensor(ng_i, device=dev) - 1]
            logq = torch.log_softmax(base.lm_head(h).float(), -1)  # [M, V]
            tok = torch.tensor([int(recs[b].draft_ids[i]) for b, i in ng_rec], device=dev)
            tok_logq = logq.gather(1, tok.unsqueeze(1)).squeeze(1)  # [M]
            if cfg.loss == "dm+ngram":
                lam = (torch.tensor(ng_w, device=dev) if cfg.ngram_lambda == "p"
                       else torch.full((len(ng_i),), float(cfg.ngram_lambda), device=dev))
                ng = ngram_nll(tok_logq, lam)
                total = total + ng.sum()
                parts["ngram"] = (float(ng.detach().sum()), len(ng_i))
            else:
                total = total + self._approx(recs, ng_rec, logq, tok_logq)
        return total, parts

    def _rows(self, recs, refs, dev: torch.device):
        """The target's rows ``refs`` ((batch index, row) pairs) padded to one width, on ``dev``:
        ids [N, K] (-1 pad), probs [N, K], other-mass [N]."""
        K = max((recs[b].row_ids.shape[1] for b, _ in refs), default=1) or 1
        rids = torch.full((len(refs), K), -1, dtype=torch.long)
        rprobs = torch.zeros(len(refs), K)
        rother = torch.ones(len(refs))
        for n, (b, r) in enumerate(refs):
            k = recs[b].row_ids.shape[1]
            rids[n, :k] = recs[b].row_ids[r].long()
            rprobs[n, :k] = recs[b].row_probs[r].float()
            rother[n] = float(recs[b].row_other[r])
        return rids.to(dev), rprobs.to(dev), rother.to(dev)

    def _approx(self, recs, ng_rec, logq, tok_logq) -> torch.Tensor:
        """Sum of approximate-KL terms over whole n-gram segments in the batch."""
        index = {ref: n for n, ref in enumerate(ng_rec)}
        firsts, seg, refs, direct, pn = [], [], [], [], []
        for n, (b, i) in enumerate(ng_rec):
            r = recs[b]
            if not bool(r.ngram_first[i]) or int(r.ngram_row[i]) < 0:
                continue
            members = [index.get((b, i + j)) for j in range(int(r.ngram_len[i]))]
            if any(m is None for m in members):
                continue  # segment cut by truncation
            firsts.append(n)
            seg.append(tok_logq[members].sum())
            refs.append((b, int(r.ngram_row[i])))
            direct.append(int(r.ngram_first_direct[i]))
            pn.append(float(r.ngram_p[i]))
        if not firsts:
            return logq.new_zeros(())
        dev = logq.device
        rids, rprobs, rother = self._rows(recs, refs, dev)
        terms = ngram_approx_kl(logq[firsts], torch.stack(seg), torch.tensor(direct, device=dev),
                                torch.tensor(pn, device=dev), rids, rprobs, rother, self.cfg.divergence)
        return terms.sum()

    # ------------------------------------------------------------------ updates
    def step(self, records: list[Record]) -> dict:
        """One AdamW step on one batch: on the CPU its gradient summed over pieces of MICRO records
        (the loss is a sum of each record's terms, so the step is the whole batch's; only a piece's
        activations are held for its backward at a time), then divided by the batch's positions."""
        self.model.train()
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        total, sums = 0.0, {}
        micro = MICRO if model_device(self.model).type == "cpu" else len(records)  # an accelerator: at once
        for i in range(0, len(records), micro):
            if i and self.between is not None:
                self.between()
            piece, got = self._sums(records[i:i + micro])
            if piece.requires_grad:
                piece.backward()
            total += float(piece.detach())
            for k, (v, n) in got.items():
                sums[k] = (sums.get(k, (0.0, 0))[0] + v, sums.get(k, (0.0, 0))[1] + n)
        count = sums.pop("positions", (0.0, 0))[1]
        params = [p for group in self.opt.param_groups for p in group["params"] if p.grad is not None]
        if count and params:
            for p in params:
                p.grad.div_(count)
            self.opt.step()
        self.model.eval()
        self.steps += 1
        info = {"step": self.steps, "loss": total / count if count else 0.0, **_means(sums), "positions": count,
                "seconds": time.perf_counter() - t0}
        self.history.append(info)
        return info

    def add(self, record: Record) -> list[dict]:
        """Buffer a record; when the buffer reaches the update interval, train on it and clear it."""
        self.buffer.append(record)
        if len(self.buffer) < self.cfg.update_interval:
            return []
        out = [self.step(self.buffer[i:i + self.cfg.batch_size])
               for i in range(0, len(self.buffer), self.cfg.batch_size)]
        self.buffer.clear()
        return out
