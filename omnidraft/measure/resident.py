"""Where a process's memory is, read from /proc (Linux; elsewhere nothing): its resident bytes
grouped by what holds them. Each model file mapped in place is a part of its own (a program's
``.pte`` and ``.ptd``, a GGUF, safetensors: pages read from the file, shared with the page cache);
``anonymous`` is everything allocated (the packed weights XNNPACK makes when a program loads, KV
caches, PyTorch tensors, Python's objects); ``other files`` the libraries. ``total`` and ``peak``
are VmRSS and VmHWM.

Knows /proc's formats; nothing about which part of OmniDraft allocated what.
"""

from __future__ import annotations

from pathlib import Path

from omnidraft.models.budget import status

MODEL_FILES = (".pte", ".ptd", ".gguf", ".safetensors", ".bin")


def _group(path: str) -> str:
    if path.endswith(MODEL_FILES):
        p = Path(path)
        return f"{p.parent.name}/{p.name}"
    if not path or path.startswith("["):  # [heap], [stack], [anon:...], unnamed mappings
        return "anonymous"
    return "other files"


def resident(pid: int | str = "self") -> dict[str, int]:
    """{part: resident bytes} of process ``pid``, with ``total`` and ``peak``; {} where /proc
    cannot be read (not Linux, a process gone)."""
    parts: dict[str, int] = {}
    try:
        group = "anonymous"
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head, _, rest = line.partition(" ")
                if "-" in head and not head.endswith(":"):  # a mapping: address perms offset dev inode [path]
                    fields = rest.split(maxsplit=4)
                    group = _group(fields[4].strip() if len(fields) > 4 else "")
                elif head == "Rss:":
                    parts[group] = parts.get(group, 0) + int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    now = status(pid)
    if not now:
        return {}
    return {**parts, "total": now["VmRSS"], "peak": now["VmHWM"]}


def proportional(pid: int | str = "self") -> int:
    """Process ``pid``'s proportional set size (PSS): its resident pages, each shared one divided
    among the processes that map it, so that a tree's sum is the memory it holds at once (forked
    children's copy-on-write pages and a mapped file counted once); 0 where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
