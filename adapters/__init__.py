"""Per-target LoRA adapters and acceptance heads (omnidraft.adapters). Filled in by the distillation issue."""
