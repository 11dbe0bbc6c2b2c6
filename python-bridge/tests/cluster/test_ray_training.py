"""GSPO on Ray: trainer rank and engine replica as actors, weights published each step."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import sys
from pathlib import Path

import pytest

from lego_rl.trainer.checkpoint import CheckpointStore
from lego_rl.model.tiny import write_tiny_model

RAY = Path(sys.executable).parent / "ray"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny"), tokenizer="bytes", seed=0)


def _train(model_dir: Path, checkpoints: Path, *extra: str) -> dict[str, float]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    result = subprocess.run(
        [sys.executable, "-m", "lego_rl.cluster.train", "--model", str(model_dir), "--checkpoints", str(checkpoints),
         "--toy-steps", "4", "--lr", "3e-3", "--log", str(checkpoints.parent / "log.jsonl"), *extra],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_local_ray_run_trains_publishes_and_checkpoints_every_step(model_dir: Path, tmp_path: Path) -> None:
    summary = _train(model_dir, tmp_path / "ckpt")
    assert summary["steps"] == 4 and summary["policy_version"] == 4
    store = CheckpointStore(root=tmp_path / "ckpt")
    assert store.latest() == tmp_path / "ckpt" / "step-00000004"
    # The newest two stay (--keep-checkpoints' default); one is written after every step.
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("step-*")) == ["step-00000003", "step-00000004"]
    steps = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [s["policy_version"] for s in steps] == [1, 2, 3, 4]
    assert all(s["mismatch/pearson_prob"] > 0.999 for s in steps)


@pytest.mark.slow
def test_two_trainer_ranks_shard_the_experts_and_checkpoint_every_rank(model_dir: Path, tmp_path: Path) -> None:
    summary = _train(model_dir, tmp_path / "ckpt", "--trainer-ranks", "2")
    assert summary["steps"] == 4 and summary["policy_version"] == 4
    assert (tmp_path / "ckpt" / "LATEST").read_text() == "step-00000004"
    for rank in (0, 1):
        assert (tmp_path / "ckpt" / f"rank-{rank}" / "step-00000004" / "trainer.json").exists()
        assert sorted(p.name for p in (tmp_path / "ckpt" / f"rank-{rank}").glob("step-*")) == ["step-00000003", "step-00000004"]
    steps = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert all(s["parallel/expert_ranks"] == 2 for s in steps)
    assert all(s["mismatch/pearson_prob"] > 0.999 for s in steps)


@pytest.mark.slow
def test_ray_address_joins_an_existing_cluster(model_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    port = str(_free_port())
    # A short temp dir: Ray's Unix socket paths must fit in 107 bytes, pytest's tmp paths may not.
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    started = subprocess.run(
        [str(RAY), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
         "--include-dashboard=false", f"--temp-dir={temp_dir}"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        summary = _train(model_dir, tmp_path / "ckpt", "--ray-address", f"127.0.0.1:{port}")
        assert summary["steps"] == 4
    finally:
        subprocess.run([str(RAY), "stop", "--force"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
