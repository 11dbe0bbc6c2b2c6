"""The loop's staleness bound: rollouts sampled by weights too far behind the trainer's are not trained,
nor are those the rollout worker shipped `stale` or dropped as over length (schema 2.3 records)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

from lego_rl.engine import Engine, EngineConfig
from lego_rl.model import load_model
from lego_rl.schema import batch_records, decode_batch, encode_batch
from lego_rl.schema.vectors import build_batch, load_cases
from lego_rl.trainer import exclusion_reason, group_advantages, outcome_of
from lego_rl.trainer.driver import LocalPolicy, LoopConfig, train
from lego_rl.trainer.sources import TrainingBatch
from lego_rl.trainer.step import PolicyUpdater, StepConfig
from lego_rl.toy import ToyTask, rollout_batch


def _batches_sampled_by_version_0(model_dir: Path, count: int) -> list[bytes]:
    engine = Engine(load_model(model_dir), EngineConfig())
    task = ToyTask(prompts=((104, 105), (111, 107)), target_token_ids=frozenset(range(97, 123)), group_size=4, max_tokens=6)
    return [rollout_batch(engine, task, step)[0] for step in range(count)]


def _train(model_dir: Path, data: list[bytes], tmp_path: Path, max_staleness: int | None) -> list[dict[str, float]]:
    model = load_model(model_dir)
    policy = LocalPolicy(updater=PolicyUpdater(model, StepConfig(lr=1e-3)), layers=len(model.config.moe_layers),
                         top_k=model.config.num_experts_per_tok)
    source = [TrainingBatch(batch_id=f"b{i}", load=lambda d=d: decode_batch(d), done=lambda: None) for i, d in enumerate(data)]
    log = StringIO()
    train(source, policy, LoopConfig(checkpoint_dir=tmp_path / f"ckpt-{max_staleness}", max_staleness=max_staleness), log=log)
    return [json.loads(line) for line in log.getvalue().splitlines()]


def test_on_policy_bound_trains_the_first_batch_and_excludes_the_stale_ones(byte_model_dir: Path, tmp_path: Path) -> None:
    data = _batches_sampled_by_version_0(byte_model_dir, 3)
    steps = _train(byte_model_dir, data, tmp_path, max_staleness=0)
    assert [s["policy_version"] for s in steps] == [1, 1, 1]  # only the first batch updated the weights
    assert "batch/excluded_stale" not in steps[0]
    assert steps[1]["batch/excluded_stale"] == steps[2]["batch/excluded_stale"] == 8
    assert [s["batch/staleness_max"] for s in steps] == [0.0, 1.0, 1.0]
    assert steps[0]["optim/lr"] == 1e-3  # the monitor's lr_zero alert reads it from the step log


def test_a_bound_of_one_version_lets_the_next_batch_train(byte_model_dir: Path, tmp_path: Path) -> None:
    data = _batches_sampled_by_version_0(byte_model_dir, 3)
    steps = _train(byte_model_dir, data, tmp_path, max_staleness=1)
    assert [s["policy_version"] for s in steps] == [1, 2, 2]
    assert steps[2]["batch/excluded_stale"] == 8


def test_records_the_worker_shipped_stale_or_dropped_as_over_length_are_left_out_counted_by_reason() -> None:
    cases = {c["name"]: c for c in load_cases()["trajectory_batches"]}
    rows = [t for name in ("trajectories-moe-u8", "trajectories-dense") for t in _decoded_records(cases[name])]
    by_id = {t.trajectory_id: outcome_of(t) for t in rows}
    # traj-0001 was shipped stale; traj-0006 is an over-length drop; traj-0005 is fresh and whole.
    assert by_id["traj-0001"].stale_at_ship and by_id["traj-0001"].policy_version == 7  # the record's min_policy_version
    assert [exclusion_reason(by_id[i]) for i in ("traj-0001", "traj-0002", "traj-0005", "traj-0006")] == [
        "stale_at_ship", "env_error", None, "over_length"]
    # With no trainer bound the worker's flag still holds; the trainer's own bound is judged on the record's versions.
    assert exclusion_reason(by_id["traj-0005"], min_policy_version=3) == "stale"
    result = group_advantages(list(by_id.values()))
    assert result.metrics()["batch/excluded_stale_at_ship"] == 1.0
    assert result.metrics()["batch/excluded_over_length"] == 1.0


def _decoded_records(case: dict) -> list:  # type: ignore[type-arg]
    rows, routing = build_batch(case, "Trajectory")
    return batch_records(decode_batch(encode_batch("Trajectory", rows, routing)))
