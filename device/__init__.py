"""On-device runtime (omnidraft.device): runtime.ExecuTorchLM runs the exported drafter program
behind the eager drafter's interface, with a swappable per-target adapter .ptd."""
