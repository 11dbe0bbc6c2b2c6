"""Rollouts cross the data plane into GSPO training, exactly once, across a trainer kill.

The Python engine samples toy rollouts; a TypeScript rollout worker sends them
through the real sender (spool, credits, acks) over ZeroMQ; the trainer's
receiver validates and spools them; the trainer trains on them. Killing the
trainer mid-run loses nothing: on restart it first replays what its receiver
had accepted but it had not trained.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lego_rl.engine import Engine, EngineConfig
from lego_rl.model import load_model
from lego_rl.model.tiny import write_tiny_model
from lego_rl.trainer.checkpoint import CheckpointStore
from lego_rl.toy import ToyTask, rollout_batch

REPO = Path(__file__).resolve().parents[1]
TSX = REPO / "ts" / "node_modules" / ".bin" / "tsx"
BATCHES = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _trainer(model: Path, address: str, work: Path, max_steps: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "lego_rl.trainer", "--model", str(model), "--receive", address,
         "--receiver-spool", str(work / "receiver"), "--checkpoints", str(work / "ckpt"),
         "--log", str(work / "steps.jsonl"), "--max-steps", str(max_steps), "--lr", "1e-3"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )


def _wait_for(predicate, what: str, process: subprocess.Popen[bytes], deadline_s: float = 180) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if predicate():
            return
        if process.poll() is not None:
            raise AssertionError(f"trainer exited before {what}: {process.stderr.read().decode()[-2000:] if process.stderr else ''}")
        time.sleep(0.05)  # polling files the trainer writes; not synchronisation by sleeping
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_rollouts_sent_by_a_typescript_worker_train_exactly_once_across_a_trainer_kill(tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "tiny", tokenizer="bytes", seed=0)
    engine = Engine(load_model(model), EngineConfig())
    task = ToyTask(prompts=(tuple(b"fix: "), tuple(b"add: ")), target_token_ids=frozenset(range(97, 123)),
                   group_size=4, max_tokens=8)
    files = []
    for step in range(BATCHES):
        data, _ = rollout_batch(engine, task, step)
        files.append(tmp_path / f"rollouts-{step}.arrow")
        files[-1].write_bytes(data)

    address = f"tcp://127.0.0.1:{_free_port()}"
    trainer = _trainer(model, address, tmp_path, max_steps=BATCHES)
    sender = subprocess.run(
        [str(TSX), "src/transport/fixtures/send-arrow-files.ts", "--to", address, "--spool", str(tmp_path / "sender"),
         *map(str, files)],
        cwd=REPO / "ts", capture_output=True, text=True, timeout=180,
    )
    assert sender.returncode == 0, sender.stderr[-2000:]
    assert json.loads(sender.stdout.strip().splitlines()[-1])["stats"]["accepted"] == BATCHES

    steps_log = tmp_path / "steps.jsonl"
    _wait_for(lambda: steps_log.exists() and len(steps_log.read_text().splitlines()) >= 1, "the first step", trainer)
    os.killpg(trainer.pid, signal.SIGKILL)
    trainer.wait()

    restarted = _trainer(model, address, tmp_path, max_steps=BATCHES)
    assert restarted.wait(timeout=300) == 0, restarted.stderr.read().decode()[-2000:] if restarted.stderr else ""
    store = CheckpointStore(root=tmp_path / "ckpt")
    position = store.load(store.latest(), load_model(model), None)  # type: ignore[arg-type]
    assert position.step == BATCHES
    assert len(set(position.consumed_batch_ids)) == BATCHES == len(position.consumed_batch_ids)
    accepted = (tmp_path / "receiver" / "accepted.log").read_text().split()
    assert sorted(position.consumed_batch_ids) == sorted(accepted)
