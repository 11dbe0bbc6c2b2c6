"""Checkpoints resume training exactly and never expose a half-written step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lego_rl.trainer.checkpoint import CheckpointError, CheckpointStore, TrainerPosition


def _model_and_optimizer(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, k: int) -> None:
    x = torch.linspace(-1, 1, 16).reshape(4, 4) * (k + 1)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def test_resuming_from_a_checkpoint_continues_training_bit_for_bit(tmp_path: Path) -> None:
    store = CheckpointStore(root=tmp_path)
    model, optimizer = _model_and_optimizer()
    for k in range(3):
        _step(model, optimizer, k)
    store.save(model, optimizer, TrainerPosition(step=3, policy_version=3, consumed_batch_ids=["b1", "b2", "b3"]))
    for k in range(3, 5):
        _step(model, optimizer, k)

    resumed_model, resumed_optimizer = _model_and_optimizer(seed=99)
    position = store.load(store.latest(), resumed_model, resumed_optimizer)  # type: ignore[arg-type]
    assert position == TrainerPosition(step=3, policy_version=3, consumed_batch_ids=["b1", "b2", "b3"])
    for k in range(3, 5):
        _step(resumed_model, resumed_optimizer, k)
    for a, b in zip(model.parameters(), resumed_model.parameters()):
        assert torch.equal(a, b)


def test_a_save_killed_before_the_pointer_moved_leaves_the_previous_checkpoint_current(tmp_path: Path) -> None:
    store = CheckpointStore(root=tmp_path)
    model, optimizer = _model_and_optimizer()
    store.save(model, optimizer, TrainerPosition(step=1, policy_version=1))
    # What a kill mid-save leaves behind: a staging folder, no LATEST change.
    (tmp_path / ".step-00000002.partial-123").mkdir()
    (tmp_path / ".step-00000002.partial-123" / "model.safetensors").write_bytes(b"half")
    assert store.latest() == tmp_path / "step-00000001"


def test_a_checkpoint_for_another_model_is_refused_with_the_mismatch_named(tmp_path: Path) -> None:
    store = CheckpointStore(root=tmp_path)
    model, optimizer = _model_and_optimizer()
    path = store.save(model, optimizer, TrainerPosition(step=1, policy_version=1))
    other = torch.nn.Sequential(torch.nn.Linear(4, 8))
    with pytest.raises(CheckpointError, match="does not match the model|cannot load weights"):
        store.load(path, other, None)


def test_no_checkpoint_yet_means_start_from_scratch(tmp_path: Path) -> None:
    assert CheckpointStore(root=tmp_path / "none").latest() is None


def test_only_the_newest_checkpoints_stay_and_the_one_latest_names_always_does(tmp_path: Path) -> None:
    store = CheckpointStore(root=tmp_path, keep=2)
    model, optimizer = _model_and_optimizer()
    for step in range(1, 5):
        _step(model, optimizer, step)
        store.save(model, optimizer, TrainerPosition(step=step, policy_version=step))
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000003", "step-00000004"]
    assert store.latest() == tmp_path / "step-00000004"
    # Expert-parallel ranks save under rank-<i>/ and the coordinator moves LATEST after all of them.
    for rank in ("rank-0", "rank-1"):
        rank_store = CheckpointStore(root=tmp_path / "ranks" / rank)
        for step in range(1, 4):
            rank_store.save(model, optimizer, TrainerPosition(step=step, policy_version=step), point_latest=False)
    coordinator = CheckpointStore(root=tmp_path / "ranks", keep=1)
    coordinator.point_latest("step-00000003")
    for rank in ("rank-0", "rank-1"):
        assert [p.name for p in (tmp_path / "ranks" / rank).glob("step-*")] == ["step-00000003"]
    # The step LATEST names is never pruned from under it, even when it is not among the newest.
    store = CheckpointStore(root=tmp_path, keep=1)
    store.point_latest("step-00000003")
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000003", "step-00000004"]


def test_keep_zero_keeps_every_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(root=tmp_path, keep=0)
    model, optimizer = _model_and_optimizer()
    for step in range(1, 4):
        store.save(model, optimizer, TrainerPosition(step=step, policy_version=step))
    assert len(list(tmp_path.glob("step-*"))) == 3
