"""The trainer on the live data plane: a TS rollout worker's batches train exactly once, and the
trainer's policy versions flow back to that worker (the rollout side's staleness bound reads them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lego_rl.engine import Engine, EngineConfig
from lego_rl.model import load_model
from lego_rl.toy import ToyTask, rollout_batch

REPO = Path(__file__).resolve().parents[3]
TSX = REPO / "ts" / "node_modules" / ".bin" / "tsx"
SENDER = REPO / "ts" / "src" / "transport" / "fixtures" / "send-arrow-files.ts"
BATCHES = 3


def _toy_batches(model_dir: Path, folder: Path) -> list[Path]:
    engine = Engine(load_model(model_dir), EngineConfig())
    task = ToyTask(prompts=(tuple(b"fix: "), tuple(b"add: ")), target_token_ids=frozenset(range(97, 123)),
                   group_size=4, max_tokens=8)
    files = []
    for step in range(BATCHES):
        files.append(folder / f"rollouts-{step}.arrow")
        files[-1].write_bytes(rollout_batch(engine, task, step)[0])
    return files


@pytest.mark.slow
@pytest.mark.parametrize("handover", ["consumer", "spool"])
def test_a_ts_worker_s_batches_train_once_and_the_trainer_s_versions_reach_it(
    byte_model_dir: Path, tmp_path: Path, handover: str
) -> None:
    short = Path(tempfile.mkdtemp(prefix="lgl-", dir="/tmp"))  # ipc:// paths must fit in sockaddr_un
    address = f"ipc://{short}/trainer.sock"
    files = _toy_batches(byte_model_dir, tmp_path)
    log = tmp_path / "steps.jsonl"
    trainer = subprocess.Popen(
        [sys.executable, "-m", "lego_rl.trainer", "--model", str(byte_model_dir), "--receive", address,
         "--handover", handover, "--receiver-spool", str(tmp_path / "rx"), "--checkpoints", str(tmp_path / "ckpt"),
         "--log", str(log), "--max-steps", str(BATCHES), "--lr", "1e-3", "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        sender = subprocess.run(
            [str(TSX), str(SENDER), "--to", address, "--spool", str(tmp_path / "tx"), "--wait-version", str(BATCHES - 1),
             *map(str, files)],
            capture_output=True, text=True, timeout=300, cwd=REPO / "ts", env={**os.environ, "NODE_NO_WARNINGS": "1"},
        )
        if sender.returncode != 0:
            trainer.kill()
            raise AssertionError(f"worker failed: {sender.stderr}\ntrainer: {trainer.stderr.read().decode() if trainer.stderr else ''}"
                                 f"\nsteps: {log.read_text() if log.exists() else 'none'}")
        events = [json.loads(line) for line in sender.stdout.splitlines()]
        # The version after the last batch is announced as the trainer exits, and a closing
        # connection may drop it (Receiver.close); the one before arrives while it runs.
        assert {"type": "policy_version", "version": BATCHES - 1} in events
        done = next(e for e in events if e["type"] == "done")
        assert done["stats"]["accepted"] == BATCHES
        assert trainer.wait(timeout=120) == 0, trainer.stderr.read().decode() if trainer.stderr else ""
    finally:
        trainer.kill()
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert len({s["batch_id"] for s in steps}) == BATCHES == len(steps)
    assert [s["policy_version"] for s in steps] == [1, 2, 3]
    assert not list((tmp_path / "tx").rglob("*.lgrb")), "every batch acked, so the sender's spool is empty"
    receiver_files = list((tmp_path / "rx").rglob("*.lgrb"))
    assert len(receiver_files) == (BATCHES if handover == "spool" else 0)
