"""Per-target adapters (omnidraft.adapters): versioned LoRA adapters and acceptance heads per pair."""

from .store import AdapterStore

__all__ = ["AdapterStore"]
