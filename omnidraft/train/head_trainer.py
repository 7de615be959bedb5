"""Training acceptance heads from verification records, alone or beside distillation.

HeadTrainer turns records into (hidden, embedding, label) triples with a no-grad drafter
forward and takes weighted-BCE steps on the head. AdaptiveTrainer schedules it with an
OnlineTrainer: 'joint' (OmniDraft Algorithm 3: a head step on every distillation batch) or
'interleaved' (Algorithm 4: a bounded replay buffer R and several head steps per distillation
update). Head gradients never reach the drafter. Knows records, models and optimisers; nothing
about decoding.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque

import torch

from omnidraft.models.acceptance import AcceptanceHead, HeadConfig
from omnidraft.models.lm import model_device
from omnidraft.train.head_labels import acceptance_labels, weighted_bce
from omnidraft.errors import OmniDraftError
from omnidraft.train.records import Record
from omnidraft.train.trainer import OnlineTrainer, base_model, padded_batch

MODES = ("joint", "interleaved", "adapt")
_CHUNK = 256  # LM-head rows per chunk when scoring a batch (bounds the [rows, V] logits)


@torch.no_grad()
def head_batch(model, records: list[Record], mode: str, max_tokens: int = 256
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Head inputs and labels for ``records`` under the drafter ``model`` (HF causal LM, maybe
    peft-wrapped). Returns hidden [N, H] (the state that produced each labelled token), emb
    [N, H] (that token's input embedding), labels [N], on the model's device."""
    base, dev = base_model(model), model_device(model)
    recs, ids, mask = padded_batch(records, max_tokens)
    was_training = model.training
    model.eval()
    hidden = base.model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state.float()  # [B, L, H]
    model.train(was_training)
    emb_table = base.get_input_embeddings()
    hs, es, ys = [], [], []
    for b, r in enumerate(recs):
        n = r.length
        tok = r.draft_ids[1:n].long().to(dev)  # [n-1] the token each state predicts
        tok_logq = torch.zeros(n)  # the labels are made on the CPU, beside the record
        argmax_ok = torch.zeros(n, dtype=torch.bool)
        for s in range(0, n - 1, _CHUNK):
            logits = base.lm_head(hidden[b, s:min(n - 1, s + _CHUNK)]).float()  # [c, V]
            t = tok[s:s + logits.shape[0]]
            tok_logq[s + 1:s + 1 + len(t)] = torch.log_softmax(logits, -1).gather(1, t[:, None])[:, 0].cpu()
            argmax_ok[s + 1:s + 1 + len(t)] = (logits.argmax(-1) == t).cpu()
        pos, lab = acceptance_labels(r, tok_logq, argmax_ok, mode)
        if len(pos):
            hs.append(hidden[b, pos.to(dev) - 1])
            es.append(emb_table(r.draft_ids[pos].long().to(dev)).float())
            ys.append(lab.to(dev))
    if not hs:
        H = hidden.shape[-1]
        return torch.zeros(0, H, device=dev), torch.zeros(0, H, device=dev), torch.zeros(0, device=dev)
    return torch.cat(hs), torch.cat(es), torch.cat(ys)


class HeadTrainer:
    """AdamW on one acceptance head, with the drafter ``model`` frozen for it."""

    def __init__(self, head: AcceptanceHead, model, cfg: HeadConfig):
        self.head, self.model, self.cfg = head, model, cfg
        head.logit_shift.fill_(math.log(cfg.mismatch_weight))  # calibrated P at inference
        self.opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=0.01)
        self.steps = 0
        self.history: list[dict] = []

    def loss(self, records: list[Record]) -> torch.Tensor:
        h, e, y = head_batch(self.model, records, self.cfg.labels, self.cfg.max_tokens)
        if not len(y):
            return torch.zeros((), requires_grad=True)
        return weighted_bce(self.head(h, e), y, self.cfg.mismatch_weight)

    def step(self, records: list[Record]) -> dict:
        t0 = time.perf_counter()
        h, e, y = head_batch(self.model, records, self.cfg.labels, self.cfg.max_tokens)
        self.head.train()
        loss = weighted_bce(self.head(h, e), y, self.cfg.mismatch_weight) if len(y) else None
        if loss is not None:
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        self.head.eval()
        self.steps += 1
        info = {"head_step": self.steps, "bce": float(loss.detach()) if loss is not None else 0.0,
                "labels": len(y), "accept_label_mean": float(y.mean()) if len(y) else 0.0,
                "seconds": time.perf_counter() - t0}
        self.history.append(info)
        return info

    def fit(self, records: list[Record], epochs: int = 1, seed: int = 0) -> list[dict]:
        """Offline (pre)training: ``epochs`` shuffled passes over ``records``."""
        rnd = random.Random(seed)
        out = []
        for _ in range(epochs):
            order = list(records)
            rnd.shuffle(order)
            for i in range(0, len(order), self.cfg.batch_size):
                out.append(self.step(order[i:i + self.cfg.batch_size]))
        return out


class AdaptiveTrainer:
    """Distillation plus head training from one record stream.

    ``joint``: every distillation batch also trains the head (Algorithm 3). ``interleaved``:
    records also enter a replay buffer R (at most ``replay_size``); after each distillation
    update the head takes ``head_steps`` steps on random batches from R (Algorithm 4).
    ``adapt``: no distillation (``distill`` None); head steps from R every update interval.
    """

    def __init__(self, distill: OnlineTrainer | None, head: HeadTrainer, mode: str,
                 update_interval: int = 8, seed: int = 0):
        if mode not in MODES:
            raise OmniDraftError(f"unknown head training mode {mode!r}", f"choose one of {', '.join(MODES)}")
        if (mode == "adapt") != (distill is None):
            raise OmniDraftError("mode 'adapt' trains the head alone; 'joint'/'interleaved' need a distiller")
        self.distill, self.head, self.mode = distill, head, mode
        self.interval = distill.cfg.update_interval if distill else update_interval
        self.replay: deque[Record] = deque(maxlen=head.cfg.replay_size)
        self.pending: list[Record] = []
        self.rnd = random.Random(seed)

    def add(self, record: Record) -> list[dict]:
        self.replay.append(record)
        self.pending.append(record)
        if len(self.pending) < self.interval:
            return []
        batch, self.pending = self.pending, []
        out: list[dict] = []
        bs = self.head.cfg.batch_size
        if self.distill is not None:
            for i in range(0, len(batch), self.distill.cfg.batch_size):
                chunk = batch[i:i + self.distill.cfg.batch_size]
                out.append(self.distill.step(chunk))
                if self.mode == "joint":
                    out.append(self.head.step(chunk))
        if self.mode in ("interleaved", "adapt"):
            for _ in range(max(1, self.head.cfg.head_steps)):
                out.append(self.head.step(self.rnd.sample(list(self.replay), min(bs, len(self.replay)))))
        return out
