"""Per-target .ptd files: the LoRA and acceptance-head weights of one published adapter version,
stored under the keys the exported program reads them by (its parameter name where the portable
kernels read a tensor, the content key program.json records where XNNPACK does), so one program
serves every target.

Knows the FlatTensor (.ptd) format, peft's saved adapter layout and program.json; nothing about
exporting or running programs.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch

from omnidraft.errors import OmniDraftError
from omnidraft.fsio import atomic_path

from .exir_parts import exir_parts
from .info import ProgramInfo

_PEFT_KEY = re.compile(r"^base_model\.model\.(.+)\.(lora_[AB])\.weight$")


def read_ptd_keys(path: Path) -> dict[str, list]:
    """{key: [shape, dtype name]} of a .ptd file; a clear error if it is not one."""
    with exir_parts():  # read by every program load: without the exporter
        from executorch.exir._serialize._cord import Cord
        from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    try:
        payload = FlatTensorSerializer().deserialize(Cord(Path(path).read_bytes()))
    except (OSError, RuntimeError, ValueError, IndexError) as err:
        raise OmniDraftError(f"{path} is not a readable .ptd file: {err}",
                             "re-create it with `omnidraft export-adapter`") from err
    names, out = _dtype_names(), {}
    for key, entry in payload.named_data.items():
        lay = entry.tensor_layout
        if lay is None:  # raw bytes (a delegate's constant): only its size is known
            out[key] = [[len(payload.buffers[entry.buffer_index])], "bytes"]
        else:
            out[key] = [list(lay.sizes), names.get(int(lay.scalar_type), str(lay.scalar_type))]
    return out


def expected_entries(info: ProgramInfo) -> dict[str, list]:
    """{.ptd key: [shape, dtype name]} the program reads; raw entries as [[nbytes], "bytes"]."""
    out = {}
    for name, keys in info.ptd_keys.items():
        shape, dtype = info.adapter_keys[name]
        for key in keys:
            out[key] = [shape, dtype] if key == name else [[4 * math.prod(shape)], "bytes"]
    return out


def ptd_entries(tensors: dict[str, torch.Tensor], ptd_keys: dict[str, list]) -> tuple[dict, set]:
    """Adapter tensors by FQN -> ({.ptd key: tensor}, the keys to write as raw bytes)."""
    entries = {key: tensors[name] for name, keys in ptd_keys.items() for key in keys}
    return entries, {key for name, keys in ptd_keys.items() for key in keys if key != name}


def check_ptd(path: Path, info: ProgramInfo) -> None:
    """Raise unless the .ptd at ``path`` holds exactly the tensors ``info``'s program reads."""
    got, want = read_ptd_keys(path), expected_entries(info)
    missing = sorted(set(want) - set(got))
    wrong = sorted(k for k in want if k in got and got[k] != want[k])
    if missing or wrong:
        what = (f"{len(missing)} tensors missing (e.g. {missing[0]})" if missing
                else f"{wrong[0]} is {got[wrong[0]]}, the program wants {want[wrong[0]]}")
        raise OmniDraftError(f"{path} was made for another program ({what})",
                             f"write one for program {info.program_id} with `omnidraft export-adapter`")


def write_ptd(tensors: dict[str, torch.Tensor], raw: set[str], path: Path) -> None:
    """Write ``tensors`` (key -> fp32 tensor) as a .ptd, atomically; keys in ``raw`` as bare
    bytes (how XNNPACK reads its constants), the others with their tensor layout."""
    from executorch.exir._serialize.data_serializer import DataEntry, DataPayload
    from executorch.exir.tensor_layout import TensorLayout
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    buffers, named = [], {}
    for i, (key, t) in enumerate(sorted(tensors.items())):
        t = t.detach().contiguous()
        buffers.append(t.numpy().tobytes())
        named[key] = DataEntry(buffer_index=i, alignment=16,
                               tensor_layout=None if key in raw else TensorLayout.from_tensor(t))
    cord = FlatTensorSerializer().serialize(DataPayload(buffers=buffers, named_data=named))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        cord.write_to_file(f)


def adapter_tensors(version_dir: Path, info: ProgramInfo) -> dict[str, torch.Tensor]:
    """The program-keyed tensors of a published adapter version (adapter_model.safetensors,
    adapter_config.json, optional head.safetensors). The program's LoRA scaling (alpha / r) is
    fixed at export, so a version trained with another alpha has its B matrices rescaled."""
    from safetensors.torch import load_file

    version_dir = Path(version_dir)
    try:
        acfg = json.loads((version_dir / "adapter_config.json").read_text())
        state = load_file(str(version_dir / "adapter_model.safetensors"))
    except (OSError, ValueError) as err:
        raise OmniDraftError(f"{version_dir} is not a published adapter version: {err}") from err
    r_prog, a_prog = info.config["lora_rank"], info.config["lora_alpha"]
    if int(acfg["r"]) != r_prog:
        raise OmniDraftError(f"adapter rank {acfg['r']} does not fit program {info.program_id} "
                             f"(rank {r_prog})", "export a program with that --lora-rank")
    rescale = (float(acfg["lora_alpha"]) / int(acfg["r"])) / (a_prog / r_prog)
    out: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        m = _PEFT_KEY.match(key)
        if m is None:
            continue  # e.g. a modules_to_save copy: not part of the program's adapter
        name = f"lm.{m.group(1)}.{m.group(2)}.default.weight"
        out[name] = (t.float() * rescale) if m.group(2) == "lora_B" else t.float()
    head_file = version_dir / "head.safetensors"
    if head_file.is_file():
        out.update({f"accept_head.{k}": v.float() for k, v in load_file(str(head_file)).items()})
    missing = sorted(set(info.adapter_keys) - set(out))
    if any(not k.startswith("accept_head.") for k in missing):
        raise OmniDraftError(f"{version_dir} lacks {len(missing)} of the program's LoRA weights "
                             f"(e.g. {missing[0]})", "the adapter targets other modules than the program")
    if missing:  # no trained head in this version: the program's untrained default head
        from omnidraft.models.acceptance import AcceptanceHead

        head = AcceptanceHead(info.hidden_size, info.config["head_width"])
        out.update({f"accept_head.{k}": v for k, v in head.state_dict().items()})
    return {k: out[k] for k in info.adapter_keys}


def export_adapter(version_dir: Path, info: ProgramInfo, path: Path) -> Path:
    """Write the .ptd of one adapter version for one program and check it against the program."""
    write_ptd(*ptd_entries(adapter_tensors(version_dir, info), info.ptd_keys), path)
    check_ptd(path, info)
    return path


def _dtype_names() -> dict[int, str]:
    from executorch.exir.scalar_type import ScalarType

    return {int(ScalarType.FLOAT): "float32", int(ScalarType.DOUBLE): "float64", int(ScalarType.LONG): "int64",
            int(ScalarType.INT): "int32", int(ScalarType.HALF): "float16", int(ScalarType.BFLOAT16): "bfloat16"}

