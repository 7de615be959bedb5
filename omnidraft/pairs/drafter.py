"""A pair's drafter with the adapter it runs: the drafter model on its runtime carrying the LoRA
adapter and acceptance head of one published version, or none. ``adapter="latest"`` follows the
daemon: ``refresh()`` switches to a newer published version (the caller calls it between
generations, never under one); a version name pins that version; ``"none"`` runs the drafter
without adaptation (what adaptation bought is measured against it).

Knows the adapter store and the two ways a version goes live: its .ptd swapped into the
ExecuTorch program (no re-export), or its PEFT weights loaded into the eager model. Nothing
about decoding.
"""

from __future__ import annotations

from omnidraft.errors import OmniDraftError
from omnidraft.models.lm import LM
from omnidraft.models.budget import Budget
from omnidraft.models.slots import Slots

FOLLOW, NONE = "latest", "none"


def check_adapter(adapter: str, store, pair: str) -> None:
    """A one-line error unless ``adapter`` is "latest", "none" or a published version of ``pair``
    (cheap: before the drafter loads)."""
    if adapter not in (FOLLOW, NONE) and adapter not in store.versions(pair):
        known = ", ".join(store.versions(pair)) or "none published yet"
        raise OmniDraftError(f"no adapter version {adapter!r} for pair {pair}",
                             f"use 'latest', 'none' or one of: {known}")


class PairDrafter:
    def __init__(self, lm: LM, drafter: str, pair: str, store, adapter: str = FOLLOW):
        """``lm``: the drafter as ``pairs/build.load_drafter`` loaded it (no adapter);
        ``drafter``: its model name; ``pair``: the pair's name in ``store``; ``adapter``: as
        ``check_adapter`` accepts it."""
        from omnidraft.device.runtime import ExecuTorchLM

        self.lm, self.drafter, self.pair, self.store, self.adapter = lm, drafter, pair, store, adapter
        self.program = isinstance(lm, ExecuTorchLM)
        self.base = None if self.program else lm  # the eager drafter as loaded, before any adapter
        self.version: str | None = None
        self.head = None  # the eager drafter's AcceptanceHead (a program scores with the one in its .ptd)
        self.has_head = False
        self.slots, self.note, self.budget = 1, None, Budget()

    def slot(self, n: int, note=None, budget: Budget = Budget()) -> None:
        """Keep up to ``n`` caches of the drafter, one per conversation slot, as memory and ``budget``
        allow (models/slots.py): made when conversations interleave (pairs/conversations.py), the
        slots sharing one until then: re-reading a prompt costs the drafter little, and one client's
        conversations one after another never hold a second copy (the 0.5B pair's server: -0.06 GB)."""
        self.slots, self.note, self.budget = n, note, budget
        self.lm = Slots(self.lm, n, note, budget, lazy=True) if n > 1 else self.lm

    def wanted(self) -> str | None:
        """The version this drafter should run now (None: no adapter)."""
        if self.adapter == NONE:
            return None
        return self.store.latest(self.pair) if self.adapter == FOLLOW else self.adapter

    def refresh(self) -> bool:
        """Run the wanted version if it is not the one running; True when it switched."""
        version = self.wanted()
        if version is None or version == self.version:
            return False
        folder = self.store.path(self.pair, version)
        if self.program:
            from omnidraft.export.layout import ensure_pair_ptd

            self.lm.load_adapter(ensure_pair_ptd(self.pair, folder, self.lm.info))
            self.has_head = (folder / "head.safetensors").is_file()
        else:
            self._load_eager(version, folder)
        self.version = version
        return True

    def _load_eager(self, version: str, folder) -> None:
        """The version's LoRA weights into the eager model (wrapped by PEFT on first use) and its
        acceptance head."""
        from safetensors.torch import load_file

        from omnidraft.models.acceptance import AcceptanceHead
        from omnidraft.models.eager import CausalLM
        from omnidraft.quiet import loading_quietly

        model = self.lm.model
        with loading_quietly():
            if not hasattr(model, "peft_config"):
                from peft import PeftModel

                model = PeftModel.from_pretrained(model, str(folder),
                                                  adapter_name=f"{self.pair}@{version}".replace(".", "_"))
                self.lm = CausalLM(model.eval(), name=self.drafter)
                self.slot(self.slots, self.note, self.budget)
            else:
                self.store.load(model, self.pair, version)
                self.lm.reset()
        head = folder / "head.safetensors"
        self.head = AcceptanceHead.from_state(load_file(str(head))) if head.is_file() else None
        self.has_head = self.head is not None
