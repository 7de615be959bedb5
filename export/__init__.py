"""ExecuTorch export of the drafter (omnidraft.export): program.py (the exportable module), lower.py
(quantisation, torch.export, XNNPACK lowering), info.py (program.json), adapter_data.py (per-target .ptd
files), layout.py (where programs live)."""
