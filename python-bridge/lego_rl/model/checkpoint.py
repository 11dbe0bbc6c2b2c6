"""Load and save Hugging Face-layout model directories (config.json + *.safetensors).

Two expert layouts exist on disk for Qwen3-MoE:
- per expert, as the Qwen hub checkpoints ship: `mlp.experts.{e}.gate_proj.weight` [F, D],
  `.up_proj.weight` [F, D], `.down_proj.weight` [D, F];
- fused, transformers 5's in-memory layout: `mlp.experts.gate_up_proj` [E, 2F, D]
  (gate rows then up rows, transformers' qwen2_moe WeightConverter concatenates on dim 1)
  and `mlp.experts.down_proj` [E, D, F].
`load_model` accepts both; `save_model` writes either (`load_model`'s opposite).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load_file, save_file

from .config import Config
from .transformer import MoeForCausalLM

ExpertLayout = Literal["fused", "per_expert"]

_PER_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


class CheckpointError(ValueError):
    """A model directory lacks a file or tensor, or holds tensors this model does not have."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


def read_config(model_dir: str | Path) -> Config:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise CheckpointError(path, "config.json not found")
    return Config.from_hf(json.loads(path.read_text()))


def safetensors_files(model_dir: Path) -> list[Path]:
    """The weight files of an HF model directory: the shards its index names, else model.safetensors."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [model_dir / n for n in names]
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise CheckpointError(model_dir, "no *.safetensors files")
    return files


def fuse_experts(tensors: dict[str, torch.Tensor], num_experts: int) -> dict[str, torch.Tensor]:
    """Per-expert tensors -> fused `gate_up_proj` [E, 2F, D] / `down_proj` [E, D, F]; others unchanged."""
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, dict[str, dict[int, torch.Tensor]]] = defaultdict(lambda: defaultdict(dict))
    for name, t in tensors.items():
        m = _PER_EXPERT.match(name)
        if m:
            groups[m[1]][m[3]][int(m[2])] = t
        else:
            out[name] = t
    for prefix, parts in groups.items():
        for proj in ("gate_proj", "up_proj", "down_proj"):
            if sorted(parts[proj]) != list(range(num_experts)):
                raise KeyError(f"{prefix}.*.{proj}: have experts {sorted(parts[proj])}, expected 0..{num_experts - 1}")
        gate_EFD = torch.stack([parts["gate_proj"][e] for e in range(num_experts)])
        up_EFD = torch.stack([parts["up_proj"][e] for e in range(num_experts)])
        out[f"{prefix}.gate_up_proj"] = torch.cat([gate_EFD, up_EFD], dim=1)
        out[f"{prefix}.down_proj"] = torch.stack([parts["down_proj"][e] for e in range(num_experts)])
    return out


def split_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fused expert tensors -> per-expert `experts.{e}.{gate,up,down}_proj.weight` (`fuse_experts`' opposite)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if name.endswith(".mlp.experts.gate_up_proj"):
            prefix = name[: -len(".gate_up_proj")]
            gate_EFD, up_EFD = t.chunk(2, dim=1)
            for e in range(t.shape[0]):
                out[f"{prefix}.{e}.gate_proj.weight"] = gate_EFD[e].contiguous()
                out[f"{prefix}.{e}.up_proj.weight"] = up_EFD[e].contiguous()
        elif name.endswith(".mlp.experts.down_proj"):
            prefix = name[: -len(".down_proj")]
            for e in range(t.shape[0]):
                out[f"{prefix}.{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[name] = t
    return out


def load_state(model: MoeForCausalLM, tensors: dict[str, torch.Tensor], *, source: Path) -> None:
    """Copy HF-named tensors (either expert layout) into `model`; exact key match required."""
    try:
        tensors = fuse_experts(tensors, model.config.num_experts)
    except KeyError as err:
        raise CheckpointError(source, str(err.args[0])) from None
    expected = dict(model.named_parameters())  # tied lm_head is listed once, as embed_tokens
    if model.config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(source, f"missing tensors {missing[:8]}; unexpected tensors {unexpected[:8]}")
    # Every tensor is checked before any copy, so a refused state leaves the model untouched.
    for name, p in expected.items():
        if tensors[name].shape != p.shape:
            raise CheckpointError(source, f"{name} has shape {tuple(tensors[name].shape)}, model expects {tuple(p.shape)}")
        if not tensors[name].dtype.is_floating_point:
            raise CheckpointError(source, f"{name} is {tensors[name].dtype}, not a floating-point tensor")
    with torch.no_grad():
        for name, p in expected.items():
            p.copy_(tensors[name])


def load_model(
    model_dir: str | Path, *, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> MoeForCausalLM:
    """Build the model from config.json and fill it from the directory's safetensors."""
    model_dir = Path(model_dir)
    config = read_config(model_dir)
    with torch.device("meta"):
        model = MoeForCausalLM(config)
    model.to_empty(device=device)
    model.tie_weights()
    tensors: dict[str, torch.Tensor] = {}
    for f in safetensors_files(model_dir):
        if not f.is_file():
            raise CheckpointError(f, "shard listed in the index is missing")
        tensors.update(load_file(f))
    load_state(model, tensors, source=model_dir)
    return model.to(dtype)


def save_model(model: MoeForCausalLM, model_dir: str | Path, *, expert_layout: ExpertLayout = "fused") -> None:
    """Write config.json and model.safetensors (`load_model`'s opposite)."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    tensors = {name: p.detach().contiguous() for name, p in model.named_parameters()}
    if expert_layout == "per_expert":
        tensors = split_experts(tensors)
    hf = model.config.to_hf()
    hf["dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")
    (model_dir / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    save_file(tensors, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
