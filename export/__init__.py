"""ExecuTorch export of the drafter (omnidraft.export). Filled in by the ExecuTorch issue."""
