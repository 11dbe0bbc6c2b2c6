"""What an update moves, and at what rate: the trainable parameters and the learning-rate warm-up."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
import torch

from lego_rl.engine import Engine, EngineConfig
from lego_rl.model import load_model
from lego_rl.schema import decode_batch
from lego_rl.toy import ToyTask, rollout_batch
from lego_rl.trainer.checkpoint import CheckpointError
from lego_rl.trainer.driver import LocalPolicy, LoopConfig, train
from lego_rl.trainer.sources import TrainingBatch
from lego_rl.trainer.step import PolicyUpdater, StepConfig

TASK = ToyTask(prompts=((104, 105), (111, 107)), target_token_ids=frozenset(range(97, 123)), group_size=4, max_tokens=6)


def _batches(model_dir: Path, count: int) -> list[bytes]:
    # Sampled at temperature 1 by version 0: groups with mixed rewards, so every update has a gradient.
    engine = Engine(load_model(model_dir), EngineConfig())
    return [rollout_batch(engine, TASK, step)[0] for step in range(count)]


def _train(model: torch.nn.Module, config: StepConfig, data: list[bytes], checkpoints: Path, first_batch: int = 0) -> list[dict[str, float]]:
    policy = LocalPolicy(updater=PolicyUpdater(model, config), layers=len(model.config.moe_layers), top_k=model.config.num_experts_per_tok)
    source = [TrainingBatch(batch_id=f"b{i}", load=lambda d=d: decode_batch(d), done=lambda: None) for i, d in enumerate(data, first_batch)]
    log = StringIO()
    train(source, policy, LoopConfig(checkpoint_dir=checkpoints), log=log)
    return [json.loads(line) for line in log.getvalue().splitlines()]


def test_only_the_trainable_parameters_move_and_the_rest_stay_as_they_were(byte_model_dir: Path, tmp_path: Path) -> None:
    model = load_model(byte_model_dir)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    steps = _train(model, StepConfig(lr=1e-2, trainable_parameters=r"^model\.norm\."), _batches(byte_model_dir, 2), tmp_path / "ckpt")
    assert len(steps) == 2
    moved = {name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])}
    assert moved == {"model.norm.weight"}
    assert [name for name, p in model.named_parameters() if p.requires_grad] == ["model.norm.weight"]


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("no_such_parameter", "matches no parameter of the model (names look like: "),
        ("layers.(", "is not a regular expression"),
    ],
)
def test_a_trainable_pattern_that_cannot_mean_what_was_meant_is_refused(byte_model_dir: Path, pattern: str, says: str) -> None:
    with pytest.raises(ValueError, match="trainable_parameters") as refused:
        PolicyUpdater(load_model(byte_model_dir), StepConfig(trainable_parameters=pattern))
    assert says in str(refused.value)


def test_warm_up_raises_the_rate_linearly_and_a_resumed_job_continues_it(byte_model_dir: Path, tmp_path: Path) -> None:
    data = _batches(byte_model_dir, 4)
    config = StepConfig(lr=4e-3, warmup_steps=3)
    first = _train(load_model(byte_model_dir), config, data[:2], tmp_path / "ckpt")
    # A new process: the rate comes from the optimizer state in the checkpoint, not from a counter that restarts.
    resumed = _train(load_model(byte_model_dir), config, data[2:], tmp_path / "ckpt", first_batch=2)
    assert [s["optim/lr"] for s in first + resumed] == pytest.approx([4e-3 / 3, 8e-3 / 3, 4e-3, 4e-3])


def test_without_warm_up_every_update_has_the_full_rate(byte_model_dir: Path, tmp_path: Path) -> None:
    steps = _train(load_model(byte_model_dir), StepConfig(lr=1e-3), _batches(byte_model_dir, 2), tmp_path / "ckpt")
    assert [s["optim/lr"] for s in steps] == [1e-3, 1e-3]


@pytest.mark.parametrize("resumed_with", [None, r"^model\.layers\.0\.input_layernorm\."])
def test_resuming_with_other_trainable_parameters_is_refused_naming_the_setting(
        byte_model_dir: Path, tmp_path: Path, resumed_with: str | None) -> None:
    # The second pattern trains one 128-gain tensor as the first does: torch alone would load its moments silently.
    data = _batches(byte_model_dir, 2)
    _train(load_model(byte_model_dir), StepConfig(lr=1e-2, trainable_parameters=r"^model\.norm\."), data[:1], tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="written for other trainable parameters") as refused:
        _train(load_model(byte_model_dir), StepConfig(lr=1e-2, trainable_parameters=resumed_with), data[1:], tmp_path / "ckpt",
               first_batch=1)
    assert "--trainable-parameters" in str(refused.value) and "differing: " in str(refused.value)
    if resumed_with is not None:
        assert "model.layers.0.input_layernorm.weight, model.norm.weight" in str(refused.value)


def test_a_pattern_for_the_tied_output_projection_says_it_has_no_name_of_its_own(byte_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="tied to model.embed_tokens.weight"):
        PolicyUpdater(load_model(byte_model_dir), StepConfig(trainable_parameters=r"^lm_head\."))
