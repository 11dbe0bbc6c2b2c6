"""Trainer checkpoints: safetensors weights, optimizer state and the data-plane position.

Layout under the checkpoint root:
    step-00000012/model.safetensors       weights (HF names, loadable by the engine)
    step-00000012/optimizer.safetensors   optimizer tensors as state.<param>.<name>;
                                          param_groups and scalars as JSON metadata
    step-00000012/trainer.json            step, policy version, consumed batch ids
    LATEST                                name of the newest complete checkpoint
(with expert-parallel ranks, each rank's under rank-<i>/ and one LATEST at the root).
Only the newest `keep` checkpoints stay (the one LATEST names always does): the
trainer saves after every step, and each holds the weights and twice their size in
AdamW moments, so keeping all filled a 250 GB disk in a few demo runs.
A checkpoint is written into a temporary folder, fsynced and renamed, and only
then does LATEST move (by atomic rename), so a trainer killed at any point
resumes from the last complete step. No pickle: optimizer state is stored as
tensors plus JSON, so loading a checkpoint cannot run code.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model as load_weights
from safetensors.torch import save_file
from safetensors.torch import save_model as save_weights

from ..durable import fsync_dir, fsync_file

LATEST = "LATEST"


def _trained_names(model: torch.nn.Module) -> list[str]:
    return [name for name, parameter in model.named_parameters() if parameter.requires_grad]


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or does not match the model."""


@dataclass(kw_only=True, slots=True)
class TrainerPosition:
    """Where training stands: what has been trained and which weights it produced."""

    step: int
    policy_version: int
    consumed_batch_ids: list[str] = field(default_factory=list)
    """Every data-plane batch already trained, so redelivered batches are skipped after a resume."""


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{name}"] = value.detach().contiguous().cpu()
            else:
                scalars.setdefault(str(index), {})[name] = value
    metadata = {"param_groups": json.dumps(state["param_groups"]), "scalars": json.dumps(scalars)}
    return tensors, metadata


def _optimizer_state(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    for index, values in json.loads(metadata["scalars"]).items():
        state.setdefault(int(index), {}).update(values)
    return {"state": state, "param_groups": json.loads(metadata["param_groups"])}


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointStore:
    """Reads and writes checkpoints under one root folder."""

    root: Path
    keep: int = 2
    """Complete checkpoints kept, newest first (0: all). Two, so the previous one survives while the next is written."""

    def save(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, position: TrainerPosition, *, point_latest: bool = True
    ) -> Path:
        """Writes step-N atomically; moves LATEST to it unless a coordinator does that after every rank saved."""
        self.root.mkdir(parents=True, exist_ok=True)
        name = f"step-{position.step:08d}"
        final = self.root / name
        staging = self.root / f".{name}.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        # save_model (not save_file) because tied weights share storage (tie_word_embeddings).
        save_weights(model, str(staging / "model.safetensors"), metadata={"format": "pt"})
        opt_tensors, opt_meta = _optimizer_tensors(optimizer)
        save_file(opt_tensors, str(staging / "optimizer.safetensors"), metadata=opt_meta)
        (staging / "trainer.json").write_text(json.dumps({
            "step": position.step,
            "policy_version": position.policy_version,
            "consumed_batch_ids": position.consumed_batch_ids,
            # The optimizer state is per trained parameter, in this order: a resume checks it is the same set.
            "trained_parameters": _trained_names(model),
        }))
        for child in staging.iterdir():
            fsync_file(child)
        fsync_dir(staging)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
        fsync_dir(self.root)
        if point_latest:
            self.point_latest(name)
        return final

    def point_latest(self, name: str) -> None:
        """Atomically makes `name` the checkpoint a resume starts from."""
        pointer = self.root / f".{LATEST}.tmp-{os.getpid()}"
        pointer.write_text(name)
        fsync_file(pointer)
        pointer.rename(self.root / LATEST)
        fsync_dir(self.root)
        self.prune(latest=name)

    def prune(self, *, latest: str) -> list[Path]:
        """Removes checkpoints older than the newest `keep` (here and in rank-*/), never `latest`; returns them."""
        if self.keep <= 0:
            return []
        removed: list[Path] = []
        for folder in [self.root, *sorted(self.root.glob("rank-*"))]:
            # step-NNNNNNNN sorts by step; partial folders start with "." and are not matched.
            steps = sorted((p for p in folder.glob("step-*") if p.is_dir()), key=lambda p: p.name, reverse=True)
            for old in steps[self.keep:]:
                if old.name != latest:
                    shutil.rmtree(old)
                    removed.append(old)
        return removed

    def latest_name(self) -> str | None:
        pointer = self.root / LATEST
        return pointer.read_text().strip() if pointer.exists() else None

    def latest(self) -> Path | None:
        pointer = self.root / LATEST
        if not pointer.exists():
            return None
        path = self.root / pointer.read_text().strip()
        if not (path / "trainer.json").exists():
            raise CheckpointError(f"{pointer} names {path.name}, which is incomplete or missing")
        return path

    def load(self, path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> TrainerPosition:
        try:
            missing, unexpected = load_weights(model, str(path / "model.safetensors"), strict=False)
        except (OSError, RuntimeError) as error:
            raise CheckpointError(f"cannot load weights from {path}: {error}") from error
        if missing or unexpected:
            raise CheckpointError(f"checkpoint {path} does not match the model: missing {missing}, unexpected {unexpected}")
        info = json.loads((path / "trainer.json").read_text())
        if optimizer is not None:
            from safetensors import safe_open

            # torch compares only how many parameters a group has: two sets of the same size would load each
            # other's moments silently. Checkpoints from before the record have none, and are trusted.
            saved, now = info.get("trained_parameters"), _trained_names(model)
            if saved is not None and saved != now:
                differ = sorted(set(saved) ^ set(now))[:4] or ["(the same names in another order)"]
                raise CheckpointError(
                    f"checkpoint {path}: its optimizer state was written for other trainable parameters ({len(saved)} then, "
                    f"{len(now)} now; differing: {', '.join(differ)}); resume with the --trainable-parameters the job was "
                    "started with, or start from a fresh --checkpoints folder")
            with safe_open(str(path / "optimizer.safetensors"), framework="pt") as handle:
                metadata = handle.metadata() or {}
                tensors = {key: handle.get_tensor(key) for key in handle.keys()}
            optimizer.load_state_dict(_optimizer_state(tensors, metadata))
        return TrainerPosition(
            step=info["step"], policy_version=info["policy_version"], consumed_batch_ids=list(info["consumed_batch_ids"])
        )
