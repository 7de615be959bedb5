"""On-device runtime (omnidraft.device): runs the exported drafter program. Filled in by the ExecuTorch issue."""
