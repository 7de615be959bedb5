"""Where exported programs and per-target .ptd files live under $OMNIDRAFT_HOME:
programs/<model>-<quant>-s<max_seq>[-sv<k>][-target]/{program.pte, program.json, base.ptd} and
pairs/<pair>/executorch/<program_id>/<version>.ptd.

Knows folder names only; the files' contents belong to lower.py, info.py and adapter_data.py.
"""

from __future__ import annotations

from pathlib import Path

from omnidraft.errors import OmniDraftError
from omnidraft.home import safe_name, subdir

from .info import ProgramInfo

QUANTS = ("fp32", "8da8w", "8da4w")  # the base weight schemes a program is exported (and found) by


def program_dir(drafter: str, quant: str, max_seq: int, specvocab_k: int = 0, role: str = "drafter",
                head_tokens: int = 0) -> Path:
    sv = f"-sv{specvocab_k}" if specvocab_k else ""
    head = f"-h{head_tokens}" if head_tokens else ""
    suffix = "-target" if role == "target" else ""
    return subdir("programs") / f"{safe_name(drafter)}-{quant}-s{max_seq}{sv}{head}{suffix}"


def find_program(drafter: str, quant: str, max_seq: int, specvocab_k: int = 0) -> Path:
    d = program_dir(drafter, quant, max_seq, specvocab_k)
    if not (d / "program.pte").is_file():
        sv = f" --specvocab-k {specvocab_k}" if specvocab_k else ""
        raise OmniDraftError(f"no exported {quant} program of {drafter} with max_seq {max_seq}"
                             + (f" and SpecVocab k={specvocab_k}" if specvocab_k else ""),
                             f"run `omnidraft export --drafter {drafter} --quant {quant} --max-seq {max_seq}{sv}`")
    return d


def pair_ptd(pair: str, version: str, info: ProgramInfo) -> Path:
    return subdir("pairs", pair, "executorch", info.program_id) / f"{version}.ptd"


def drafter_programs(drafter: str) -> list[ProgramInfo]:
    """The program.json of every exported drafter program of ``drafter`` under this home (any
    scheme, length or SpecVocab k); unreadable ones are skipped."""
    root = subdir("programs")
    out = []
    for d in sorted(root.glob(f"{safe_name(drafter)}-*")):
        if d.name.endswith("-target") or not (d / "program.pte").is_file():
            continue
        try:
            info = ProgramInfo.load(d / "program.json")
        except OmniDraftError:
            continue  # an old format: `omnidraft export` rebuilds it, its .ptd is written on first use
        if info.role == "drafter" and info.config.get("drafter") == drafter:
            out.append(info)
    return out


def publish_ptds(pair: str, drafter: str, version_dir: Path) -> list[Path]:
    """The .ptd of a just-published adapter version for every exported program of its drafter,
    so a running Session swaps it in without converting anything. A program the adapter does not
    fit (another LoRA rank or targets) raises OmniDraftError after the others are written."""
    written, errors = [], []
    for info in drafter_programs(drafter):
        try:
            written.append(ensure_pair_ptd(pair, version_dir, info))
        except OmniDraftError as err:
            errors.append(f"program {info.program_id}: {err}")
    if errors:
        raise OmniDraftError("; ".join(errors), "the Session converts the adapter it can load on first use")
    return written


def ensure_pair_ptd(pair: str, version_dir: Path, info: ProgramInfo) -> Path:
    """The .ptd of a published adapter version for this program, written on first use."""
    from .adapter_data import export_adapter

    path = pair_ptd(pair, Path(version_dir).name, info)
    if not path.is_file():
        export_adapter(version_dir, info, path)
    return path
