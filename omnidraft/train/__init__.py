"""Adaptation (omnidraft.train): training records from verifications, distillation (hybrid KL +
NLL on LoRA), acceptance heads, tuning rounds and the background daemon."""
