"""Saved conversation states: each a bundle of models' cache states (device/kv_state.py KVState,
by model name) keyed by the conversation's target ids, kept in a least-recently-used RAM cache
bounded in bytes and written through to a folder bounded in bytes, so that a conversation comes
back, after others or after a restart, without reading its history again.

``best(ids, weights)`` is the saved bundle sharing the longest prefix with ``ids`` whose states
were computed by ``weights`` (name -> KVState.weights): a conversation that extends a saved one
finds it, and one that shares only its start (a system prompt, a pasted file) finds that part; the
caller restores each state and keeps the positions its own ids share. A file is one bundle, written
atomically (fsio.py) as safetensors with the ids, the weights and a CRC-32 of the tensors in its
header: a file that is truncated, corrupt, unreadable or for other weights is skipped with one
log line, never used (a corrupt one is removed), and a state the folder cannot take (a full disk)
stays in RAM with one log line. A file this object wrote and finds as it left it (size and
modification time) is read without its checksum (a 1.5B conversation's 72 MB: 3 ms instead of
22); one found in the folder (after a restart) is checked. The folder is read lazily (headers
only) on the first lookup.
With ``background``, files are written by a thread of their own, so a generation's turn ends when
its state is in RAM (a state waiting for its file is held in RAM until written, at most WAITING of
them; a ``kill -9`` meanwhile loses only those files, never a file half written: atomic writes).

A state's tensors are stored as they are (an ExecuTorch program's per-layer keys and values, or a
llama.cpp sequence's one uint8 blob: device/llamacpp.py), so one folder holds both kinds.

States are kept per *space* (a server's API key, as the memory's spaces are: omnidraft/serve/app.py
``memory_space``; a Session's own: ``LOCAL``): a lookup finds only its own space's, so no client
restores, or times, a conversation another key sent.

Knows KVState and files; nothing about programs, tokenizers or conversations' other pieces.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import queue
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch

from omnidraft.device.kv_state import KVState
from omnidraft.errors import OmniDraftError
from omnidraft.fsio import atomic_path
from omnidraft.models.lm import common_prefix

log = logging.getLogger("omnidraft.states")
SUFFIX = ".state"
LOCAL = "local"  # the space of a Session's own conversations (a file written without one is of it)
WAITING = 2  # states waiting for the background writer; a third put waits for the disk, as without one


@dataclass(frozen=True)
class Found:
    shared: int  # how many of the ids asked for its key shares
    states: dict[str, "KVState"]  # by model name
    where: str  # "ram" or "disk"


@dataclass
class _Saved:
    key: tuple[int, ...]
    weights: dict[str, str]  # model name -> KVState.weights
    nbytes: int
    states: dict[str, KVState] | None = None  # None: on disk only
    path: Path | None = None
    space: str = LOCAL
    written: tuple[int, int] | None = None  # the file's (size, mtime_ns) as this object wrote it
    age: int = 0  # files out in this order (the folder's by mtime, then this object's as written)

    @property
    def slot(self) -> tuple[str, tuple[int, ...]]:
        """Where it is kept: its space's, under its ids."""
        return self.space, self.key


class SavedStates:
    """At most ``ram_bytes`` of states in RAM (least recently used out first) and, with ``folder``,
    at most ``disk_bytes`` of files there (oldest out first), written by a thread of their own
    with ``background`` (``flush`` waits for them, ``close`` too). Safe across threads; counts what
    each lookup found (``restored``)."""

    def __init__(self, ram_bytes: int, folder: Path | None = None, disk_bytes: int = 0, background: bool = False):
        if ram_bytes < 0 or disk_bytes < 0:
            raise ValueError(f"SavedStates bounds must be >= 0, got {ram_bytes} and {disk_bytes}")
        self.ram_bytes, self.disk_bytes = ram_bytes, disk_bytes
        self.folder = Path(folder) if folder is not None else None
        if self.folder is not None:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise OmniDraftError(f"cannot keep conversation states in {self.folder}: {err.strerror}",
                                     "give another --state-dir, or --state-disk 0 (RAM only)") from err
        self._saved: OrderedDict[tuple[str, tuple[int, ...]], _Saved] = OrderedDict()  # (space, ids); LRU first
        self._scanned = self.folder is None
        self._lock = threading.Lock()
        self.restored = {"ram": 0, "disk": 0}  # bundles found in each
        self._waiting: queue.Queue | None = queue.Queue(WAITING) if background and self.folder is not None else None
        self._writer: threading.Thread | None = None
        self._ages = itertools.count()  # files written here: a clock finer than the file system's mtime

    # ------------------------------------------------------------------ bounds
    @property
    def ram_used(self) -> int:
        return sum(s.nbytes for s in self._saved.values() if s.states is not None)

    @property
    def disk_used(self) -> int:
        return sum(_size(s.path) for s in self._saved.values() if s.path is not None)

    def models(self) -> set[str]:
        """The names of the models whose states are kept (the folder's included)."""
        with self._lock:
            self._scan()
            return {n for s in self._saved.values() for n in s.weights}

    def held(self) -> dict[str, int]:
        """Bytes held in RAM and on disk, read under the lock (another thread may be saving)."""
        with self._lock:
            return {"ram": self.ram_used, "disk": self.disk_used}

    # ------------------------------------------------------------------ save
    def put(self, key: list[int], states: dict[str, KVState], space: str = LOCAL) -> None:
        """Keep ``states`` (one conversation's, every model's) under ``key`` (its target ids) in
        ``space``, replacing what was kept there under the same ids."""
        saved = _Saved(tuple(key), {n: s.weights for n, s in states.items()},
                       sum(s.nbytes for s in states.values()), dict(states), space=space)
        to_disk = self.folder is not None and saved.nbytes <= self.disk_bytes
        with self._lock:
            self._scan()
            old = self._saved.pop(saved.slot, None)
            if old is not None and old.path is not None:
                old.path.unlink(missing_ok=True)
            if to_disk and self._waiting is None:
                self._make_room_on_disk(saved.nbytes)
                saved.path = _written(self.folder, saved, saved.states)
                saved.written, saved.age = _stat(saved.path), next(self._ages)
            if saved.nbytes > self.ram_bytes:
                saved.states = None
            if saved.states is not None or saved.path is not None:
                self._saved[saved.slot] = saved
                self._make_room_on_disk(0, keep=saved)  # its header counted too
            self._make_room_in_ram()
        if to_disk and self._waiting is not None:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_all, name="omnidraft-states", daemon=True)
                self._writer.start()
            self._waiting.put((saved, dict(states)))  # its tensors, whatever RAM's LRU does meanwhile

    def flush(self) -> None:
        """Return when every state put so far is in its file (or known not to fit the disk)."""
        if self._waiting is not None:
            self._waiting.join()

    def close(self) -> None:
        """Write what waits, then end the writer."""
        if self._writer is not None:
            self._waiting.put(None)
            self._writer.join()
            self._writer = None

    def _write_all(self) -> None:
        """The background writer: each state's file, outside the lock (lookups go on meanwhile)."""
        while (job := self._waiting.get()) is not None:
            saved, states = job
            try:
                with self._lock:
                    if self._saved.get(saved.slot, saved) is not saved:  # put again since: the newer one counts
                        continue
                    self._make_room_on_disk(saved.nbytes)
                path = _written(self.folder, saved, states)
                with self._lock:
                    now = self._saved.get(saved.slot)
                    if now is not None and now is not saved:  # put again while this was written
                        if path is not None:
                            path.unlink(missing_ok=True)
                        continue
                    saved.path, saved.written, saved.age = path, _stat(path), next(self._ages)
                    if now is None and path is not None:  # out of RAM meanwhile: on disk, least recently used
                        self._saved[saved.slot] = saved
                        self._saved.move_to_end(saved.slot, last=False)
                    if saved.path is not None:
                        self._make_room_on_disk(0, keep=saved)
            finally:
                self._waiting.task_done()
        self._waiting.task_done()

    # ------------------------------------------------------------------ find
    def best(self, ids: list[int], weights: dict[str, str], space: str = LOCAL,
             loadable: frozenset[str] = frozenset()) -> Found | None:
        """The bundle saved in ``space`` sharing the longest prefix with ``ids`` that holds a state
        computed by one of ``weights`` (model name -> its weights now), or of a model ``loadable``
        names (not loaded yet: the caller checks its weights once loaded); None where none shares
        any. Its states are those of such models (a bundle also holds models that ran elsewhere, a
        drafter under an adapter since replaced: those read the conversation again)."""
        with self._lock:
            self._scan()
            while True:
                found = [(common_prefix(list(s.key), ids), s) for s in self._saved.values()
                         if s.space == space and _usable(s.weights, weights, loadable)]
                shared, saved = max(found, key=lambda f: f[0], default=(0, None))
                if saved is None or shared == 0:
                    return None
                where = "ram" if saved.states is not None else "disk"
                if saved.states is None:
                    saved.states = _read(saved.path, checked=saved.written != _stat(saved.path))
                    if saved.states is None:  # unusable: never offered again
                        self._saved.pop(saved.slot)
                        continue
                self.restored[where] += 1
                self._saved.move_to_end(saved.slot)
                found = Found(shared, {n: saved.states[n] for n in _usable(saved.weights, weights, loadable)}, where)
                self._make_room_in_ram()
                return found

    # ------------------------------------------------------------------ internals
    def _make_room_in_ram(self) -> None:
        used = self.ram_used
        for saved in list(self._saved.values()):
            if used <= self.ram_bytes:
                return
            if saved.states is not None:
                saved.states, used = None, used - saved.nbytes
                if saved.path is None:
                    self._saved.pop(saved.slot)

    def _make_room_on_disk(self, nbytes: int, keep: _Saved | None = None) -> None:
        """Files out, the oldest first (never ``keep``'s), until ``nbytes`` more fit the folder's bound."""
        on_disk = sorted((s for s in self._saved.values() if s.path is not None), key=lambda s: s.age)
        used = sum(_size(s.path) for s in on_disk)
        for saved in (s for s in on_disk if s is not keep):
            if used + nbytes <= self.disk_bytes:
                return
            used -= _size(saved.path)
            saved.path.unlink(missing_ok=True)
            saved.path = None
            if saved.states is None:
                self._saved.pop(saved.slot)

    def _scan(self) -> None:
        """The folder's bundles, by their headers (once; the oldest first, as the least recently used)."""
        if self._scanned:
            return
        self._scanned = True
        paths = sorted(self.folder.glob(f"*{SUFFIX}"), key=_mtime)
        for age, path in enumerate(paths, start=-len(paths)):
            head = _header(path)
            if head is None:
                continue
            saved = _Saved(tuple(head["key"]), head["weights"], head["nbytes"], None, path, head.get("space", LOCAL),
                           age=age)
            if saved.slot not in self._saved:
                self._saved[saved.slot] = saved


def _usable(saved: dict[str, str], weights: dict[str, str], loadable: frozenset[str]) -> set[str]:
    """The models of a bundle computed by ``saved`` that may restore it: computed by the same
    weights as now, or not loaded yet."""
    return {n for n, w in saved.items() if weights.get(n) == w or (n in loadable and n not in weights)}


def _tensors(states: dict[str, KVState]) -> dict[str, torch.Tensor]:
    return {f"{name}/{kind}{i}": t.contiguous() for name, s in states.items()
            for kind, ts in (("k", s.keys), ("v", s.values)) for i, t in enumerate(ts)}


def _digest(tensors: dict[str, torch.Tensor]) -> int:
    """A CRC-32 of the tensors' names and bytes (zlib: ~4 GB/s here, twice sha256's speed)."""
    crc = 0
    for name in sorted(tensors):
        crc = zlib.crc32(tensors[name].view(torch.uint8).reshape(-1).numpy(), zlib.crc32(name.encode(), crc))
    return crc


def _written(folder: Path, saved: _Saved, states: dict[str, KVState]) -> Path | None:
    """``states``' file in ``folder``, or None with one log line where the folder cannot take it
    (full, read-only): the state stays in RAM only."""
    try:
        return _write(folder, saved, states)
    except OSError as err:
        log.warning("saved state not written to %s: %s", folder, err.strerror or err)
        return None


def _write(folder: Path, saved: _Saved, states: dict[str, KVState]) -> Path:
    from safetensors.torch import save_file

    tensors = _tensors(states)
    name = hashlib.sha256(json.dumps([saved.space, list(saved.key), saved.weights]).encode()).hexdigest()[:24]
    head = {"key": list(saved.key), "space": saved.space, "weights": saved.weights, "nbytes": saved.nbytes,
            "ids": {n: list(s.ids) for n, s in states.items()}, "crc32": _digest(tensors)}
    path = folder / f"{name}{SUFFIX}"
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={"omnidraft": json.dumps(head)})
    return path


def _header(path: Path) -> dict | None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            head = json.loads((f.metadata() or {})["omnidraft"])
        if {"key", "weights", "nbytes", "ids", "crc32"} <= head.keys():
            return head
        log.warning("saved state %s skipped: written by an earlier version", path.name)
        return None
    except Exception as err:  # noqa: BLE001 - any unreadable file is skipped, never a crash
        log.warning("saved state %s skipped: unreadable (%s)", path.name, str(err).splitlines()[0][:120])
        return None


def _read(path: Path, checked: bool = True) -> dict[str, KVState] | None:
    """The bundle in ``path``, or None (one log line, the file removed) where it does not check out
    (its checksum compared only if ``checked``)."""
    from safetensors.torch import load_file

    head = _header(path)
    try:
        if head is None:
            raise ValueError("no header")
        tensors = load_file(str(path))
        if checked and _digest(tensors) != head["crc32"]:
            raise ValueError("its tensors do not match their checksum")
        return {n: KVState(w, tuple(head["ids"][n]), _stored(tensors, n, "k"), _stored(tensors, n, "v"))
                for n, w in head["weights"].items()}
    except Exception as err:  # noqa: BLE001 - a truncated or corrupt file is skipped, never a crash
        log.warning("saved state %s skipped: %s", path.name, str(err).splitlines()[0][:120] if str(err) else type(err))
        path.unlink(missing_ok=True)
        return None


def _stored(tensors: dict[str, torch.Tensor], name: str, kind: str) -> tuple[torch.Tensor, ...]:
    """``name``'s keys (``kind`` "k") or values ("v"), in order: as many as it saved (a llama.cpp state
    saves one blob of keys and no values)."""
    n = sum(1 for k in tensors if k.startswith(f"{name}/{kind}"))
    return tuple(tensors[f"{name}/{kind}{i}"] for i in range(n))


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def _stat(path: Path | None) -> tuple[int, int] | None:
    """A file's (size, mtime_ns): what says it is as it was written."""
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_size, st.st_mtime_ns)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
