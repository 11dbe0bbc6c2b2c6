"""CI smoke of the whole loop (issue 27): engine -> harness in sandboxes -> proxy -> data plane -> GSPO -> weights back.

Real processes throughout: `python -m lego_rl.engine` serving the tiny random MoE with the
Qwen3 vocabulary; `python -m lego_rl.cluster.train --receive` (the data-plane receiver and
the GSPO trainer on local Ray) pushing every new version to that engine; and a real
`lego rollout --harness reference --engine tcp://...` worker running the reference agent in
Docker sandboxes through the proxy.

A random policy solves nothing, so rewards on real tasks are all 0 and GSPO has no signal
(identical-reward groups are skipped, so weights would never move). The tasks here are
therefore two "coin" tasks whose verifier (one pytest test) passes at random (`os.urandom`): the reward says
nothing about the policy, which is the point of a smoke, but groups carry reward variance, so
the trainer takes real updates, publishes versions and the engine loads them. With G=4 a group
has identical rewards with probability 1/8; the assertions that need an update say so and
hold whenever one happened, and the step count, exactly-once and correlation checks always run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lego_rl.weights import EngineServerSyncConfig, EngineServerWeightSync
from lego_rl.model.tiny import write_tiny_model
from lego_rl.transport import read_spool_file

REPO = Path(__file__).resolve().parents[1]
LEGO = REPO / "ts" / "bin" / "lego"
G = 4
GROUPS = 2

COIN_TEST_SH = """#!/bin/bash
cd /workspace
python3 -I -m pytest -p no:cacheprovider -o addopts= -q -c /tests/pytest.ini --rootdir=/workspace /tests/test_coin.py
"""
# Passes at random: a reward with variance that a random policy can get (module doc).
COIN_TEST_PY = """import os


def test_coin():
    assert os.urandom(1)[0] % 2 == 0
"""
COIN_SETUP = """#!/bin/bash
set -euo pipefail
echo 'print("hello")' > /workspace/main.py
chown -R 1000:1000 /workspace
"""


def _coin_tasks(root: Path) -> Path:
    for name in ("coin-a", "coin-b"):
        d = root / name
        (d / "environment").mkdir(parents=True)
        (d / "tests").mkdir()
        (d / "task.toml").write_text(f'version = "1.0"\n\n[metadata]\nname = "{name}"\n\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 30\n')
        (d / "instruction.md").write_text("Make main.py print the sum of 2 and 3.\n")
        (d / "environment" / "setup.sh").write_text(COIN_SETUP)
        (d / "tests" / "test.sh").write_text(COIN_TEST_SH)
        (d / "tests" / "test_coin.py").write_text(COIN_TEST_PY)
        (d / "tests" / "pytest.ini").write_text("[pytest]\n")
    return root


def _lines(process: subprocess.Popen[str], want: str, deadline_s: float) -> dict:
    """The first JSON line on `process`'s stdout whose type is `want`."""
    deadline = time.monotonic() + deadline_s
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"process exited ({process.poll()}) before printing {want}")
        if line.startswith("{") and json.loads(line).get("type") == want:
            return json.loads(line)
    raise AssertionError(f"no {want} line within {deadline_s} s")


def _containers_of(pid: int) -> list[str]:
    """Containers the process `pid` created (every sandbox container carries its creator's pid label)."""
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=lego-rl.pid={pid}"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.slow
def test_the_loop_end_to_end_engine_harness_sandbox_trainer_and_back(tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "tiny-qwen3", tokenizer="qwen3", seed=0)
    engine = subprocess.Popen([sys.executable, "-m", "lego_rl.engine", "--model", str(model), "--bind", "tcp://127.0.0.1:*"],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=(tmp_path / "engine.err").open("w"), text=True, start_new_session=True)
    trainer = None
    try:
        engine_address = _lines(engine, "listening", 120)["address"]
        # The trainer's output goes to files: Ray is chatty, and an unread pipe would block it.
        trainer_out, trainer_err = tmp_path / "trainer.out", tmp_path / "trainer.err"
        trainer = subprocess.Popen(
            [sys.executable, "-m", "lego_rl.cluster.train", "--model", str(model), "--checkpoints", str(tmp_path / "ckpt"),
             "--receive", "tcp://127.0.0.1:*", "--receiver-spool", str(tmp_path / "receiver"), "--max-steps", str(GROUPS),
             "--weights-dir", str(tmp_path / "weights"), "--sync-engine", engine_address, "--log", str(tmp_path / "steps.jsonl")],
            cwd=REPO, stdout=trainer_out.open("w"), stderr=trainer_err.open("w"), start_new_session=True,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        )
        receiver_address = None
        deadline = time.monotonic() + 300
        while receiver_address is None:
            found = [l for l in trainer_err.read_text().splitlines() if l.startswith("trainer: receiving on ")]
            if found:
                receiver_address = found[0].split()[-1]
                break
            assert trainer.poll() is None, f"trainer exited ({trainer.returncode}) before receiving: {trainer_err.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the trainer never said where it receives"
            time.sleep(0.1)  # polling a file the trainer writes; not synchronisation by sleeping

        worker_process = subprocess.Popen(
            [str(LEGO), "rollout", "--tasks", str(_coin_tasks(tmp_path / "tasks")), "--harness", "reference",
             "--engine", engine_address, "--model-dir", str(model), "--max-tokens-per-turn", "16", "--max-turns", "2",
             "--group-size", str(G), "--concurrency", str(G), "--trainer", receiver_address, "--on-policy",
             "--spool-dir", str(tmp_path / "sender"), "--producer-id", "smoke"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            out, err = worker_process.communicate(timeout=420)
        except subprocess.TimeoutExpired:
            worker_process.kill()
            raise
        assert worker_process.returncode == 0, err[-3000:]
        assert _containers_of(worker_process.pid) == [], "the worker left sandbox containers behind"
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["event"] == "summary"
        assert summary["groupsShipped"] == GROUPS and summary["trajectoriesShipped"] == GROUPS * G
        assert summary["droppedEnvErrors"] == 0 and "env_error" not in summary["statuses"]
        assert summary["sender"]["accepted"] == GROUPS and summary["sender"]["queued"] == 0

        assert trainer.wait(timeout=300) == 0, trainer_err.read_text()[-3000:]
        # Ray may forward actor output to the driver's stdout too: the summary is the last line with "steps".
        final = [json.loads(l) for l in trainer_out.read_text().splitlines() if l.startswith('{"steps"')][-1]
        steps = [json.loads(l) for l in (tmp_path / "steps.jsonl").read_text().splitlines()]
        assert len(steps) == GROUPS == final["steps"]

        # Every group shipped reached the trainer, once: the receiver's spool holds each trajectory once,
        # and every accepted batch was trained.
        ids = []
        for f in sorted((tmp_path / "receiver" / "batches").glob("*.lgrb")):
            table = pa.ipc.open_stream(read_spool_file(f).payload).read_all()
            ids += table.column("trajectory_id").to_pylist()
            for segments in table.column("segments").to_pylist():
                assert segments, "a graded rollout ships its segments"
                for s in segments:
                    assert s["routing"] is not None and any(lp < 0 for lp in s["logprobs"])
        assert len(ids) == GROUPS * G == len(set(ids))
        assert sorted(s["batch_id"] for s in steps) == sorted((tmp_path / "receiver" / "accepted.log").read_text().split())

        # What the rollouts did is in every step's line (the demo's report plots it).
        for s in steps:
            assert s["rollout/reward_mean"] in (0.0, 0.25, 0.5, 0.75, 1.0) and s["rollout/turns_mean"] >= 1, s
        # On-policy (--on-policy): the second group started only after the trainer's step on the first
        # was done and published, so no rollout was sampled by older weights than the trainer's.
        assert all(s["batch/staleness_max"] == 0 for s in steps), [s.get("batch/staleness_max") for s in steps]
        updated = [s for s in steps if s["batch/groups_trained"]]
        for s in updated:
            # The trainer's recomputed probabilities (routing replayed) against the engine's behaviour
            # probabilities, on the same weights: what is left is numerics (issue 27 asks >= 0.99; the demo 0.999).
            assert s["mismatch/pearson_prob"] >= 0.999, s
        served = EngineServerWeightSync(config=EngineServerSyncConfig(address=engine_address)).served_version()
        assert served == final["policy_version"] == len(updated)
        print(json.dumps({"smoke": {"updates": len(updated), "served_version": served,
                                    "pearson_prob": [s.get("mismatch/pearson_prob") for s in steps]}}))
    finally:
        for p in (trainer, engine):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, 15)
                p.wait(timeout=60)
