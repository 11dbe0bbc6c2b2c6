"""The rollout fleet on local Ray: a supervisor actor runs a real `lego rollout` worker, restarts it when it is
killed, and reports its health; the restarted worker resumes its run (same run id, shipped groups not run again)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
import ray

from lego_rl.cluster import RolloutWorkerSpec, connect, fleet_specs, start_rollout_fleet
from lego_rl.transport.spool_file import read_spool_file

REPO = Path(__file__).resolve().parents[3]
LEGO = REPO / "ts" / "bin" / "lego"


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    connect(None, num_cpus=2)
    yield ray.get_runtime_context().get_node_id()
    ray.shutdown()


def _receiver(spool: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "lego_rl.transport", "receive", "--bind", "tcp://127.0.0.1:*", "--spool", str(spool)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # the first line is "listening"; bounded by the test's own timeout below
        event = json.loads(line)
        if event.get("type") == "listening":
            return proc, event["address"]
    raise AssertionError(f"receiver exited ({proc.wait()}) before listening")


def _rows(spool: Path) -> list[dict]:
    rows = []
    for f in sorted((spool / "batches").glob("*.lgrb")):
        rec = read_spool_file(f)
        table = pa.ipc.open_stream(rec.payload).read_all()
        rows += [{"batch_id": rec.header.batch_id, **r} for r in table.select(["trajectory_id", "group_id", "status", "reward"]).to_pylist()]
    return rows


def _containers_of(pid: int) -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", "label=lego-rl.pid", "--format", '{{.ID}} {{.Label "lego-rl.pid"}}'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [line.split()[0] for line in out.stdout.splitlines() if line.split()[1].startswith(f"{pid}:")]


def _health_until(actor, predicate, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        health = ray.get(actor.health.remote(), timeout=60)
        if predicate(health):
            return health
        assert time.monotonic() < deadline, f"health never matched: {health}"
        time.sleep(0.2)  # polling the actor's health report (what an operator would do), bounded above


@pytest.mark.slow
def test_a_killed_worker_is_restarted_by_its_actor_and_resumes_its_run(local_ray: str, tmp_path: Path) -> None:
    receiver, address = _receiver(tmp_path / "rx")
    try:
        specs = fleet_specs(str(LEGO), ["--tasks", "easy:seed=29,count=4", "--harness", "oracle", "--group-size", "2",
                                        "--concurrency", "2", "--trainer", address, "--max-attempts", "2"],
                            producer_id="fleet", spool_root=str(tmp_path / "spools"), nodes=[local_ray], backoff_s=0.5,
                            log_dir=str(tmp_path / "logs"))
        assert specs[local_ray].args[-4:] == ("--producer-id", "fleet-0", "--spool-dir", str(tmp_path / "spools" / "fleet-0"))
        actor = start_rollout_fleet(specs)[local_ray]
        first = _health_until(actor, lambda h: h["groups_shipped"] >= 1, 400)
        assert first["state"] == "running" and first["restarts"] == 0 and first["pid"] is not None
        os.killpg(first["pid"], signal.SIGKILL)
        final = ray.get(actor.wait.remote(500), timeout=560)
        assert final["state"] == "finished", final
        assert final["restarts"] == 1 and final["exit_codes"][0] == -signal.SIGKILL and final["exit_codes"][-1] == 0
        summary = final["summary"]
        assert summary["resumed"] is True and summary["droppedEnvErrors"] == 0
        assert summary["result"]["groupsShippedBefore"] >= 1
        assert summary["result"]["groupsShipped"] + summary["result"]["groupsShippedBefore"] == 4
        assert final["node"] == ray.util.get_node_ip_address()

        rows = _rows(tmp_path / "rx")
        ids = [r["trajectory_id"] for r in rows]
        assert len(ids) == 8 and len(set(ids)) == 8, "every trajectory exactly once"
        groups = {r["group_id"] for r in rows}
        assert len(groups) == 4 and all(g.startswith(f"{summary['runId']}-g") for g in groups)
        assert all(r["status"] == "ok" and r["reward"] == 1 for r in rows)
        assert _containers_of(first["pid"]) == []
    finally:
        receiver.terminate()
        receiver.wait(30)


def test_a_worker_that_keeps_failing_is_restarted_with_back_off_then_reported_failed(local_ray: str, tmp_path: Path) -> None:
    spec = RolloutWorkerSpec(lego="/bin/false", args=(), max_restarts=2, backoff_s=0.05)
    actor = start_rollout_fleet({local_ray: spec})[local_ray]
    final = ray.get(actor.wait.remote(60), timeout=90)
    assert final["state"] == "failed" and final["restarts"] == 2 and final["exit_codes"] == [1, 1, 1]
    with pytest.raises(ValueError, match="no live Ray node"):
        start_rollout_fleet({"0" * 56: spec})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"  # a zombie is gone but for its reaping


@pytest.mark.timeout(120)
def test_a_stop_that_comes_while_the_worker_is_being_started_still_stops_it(local_ray: str, tmp_path: Path, monkeypatch) -> None:
    from lego_rl.cluster import rollout_fleet

    sleeper = tmp_path / "lego"  # stands in for `lego rollout`: runs until stopped
    sleeper.write_text("#!/bin/sh\nexec sleep 120\n")
    sleeper.chmod(0o755)
    real_command = rollout_fleet._command
    starting = threading.Event()

    def slow_command(spec: RolloutWorkerSpec) -> list[str]:
        starting.set()
        time.sleep(0.5)  # widens the window between the supervisor deciding to start the worker and starting it
        return real_command(spec)

    monkeypatch.setattr(rollout_fleet, "_command", slow_command)
    supervisor = rollout_fleet.RolloutWorkerSupervisor(RolloutWorkerSpec(lego=str(sleeper), args=(), max_restarts=0))
    assert starting.wait(30)  # the supervisor's thread is now inside that window
    started = time.monotonic()
    final = supervisor.stop()
    assert final["state"] == "stopped" and final["exit_codes"] == [-signal.SIGTERM] and final["restarts"] == 0, final
    assert time.monotonic() - started < 30
    assert final["pids"] and not any(_alive(pid) for pid in final["pids"])


@pytest.mark.timeout(120)
def test_a_process_the_worker_leaves_holding_its_output_does_not_hold_the_stop(local_ray: str, tmp_path: Path) -> None:
    from lego_rl.cluster.rollout_fleet import PIPE_DRAIN_S, RolloutWorkerSupervisor

    orphan_pid = tmp_path / "orphan.pid"
    worker = tmp_path / "lego"  # a worker that leaves a process of its own session holding its stdout and stderr
    worker.write_text(f"#!/bin/sh\nsetsid sleep 300 &\necho $! > {orphan_pid}\necho '{{\"event\": \"summary\"}}'\nexec sleep 120\n")
    worker.chmod(0o755)
    supervisor = RolloutWorkerSupervisor(RolloutWorkerSpec(lego=str(worker), args=(), max_restarts=0))
    try:
        deadline = time.monotonic() + 30
        while supervisor.health()["summary"] is None:
            assert time.monotonic() < deadline, supervisor.health()
            time.sleep(0.05)
        started = time.monotonic()
        final = supervisor.stop()
        assert final["state"] == "stopped" and final["exit_codes"] == [-signal.SIGTERM], final
        assert time.monotonic() - started < PIPE_DRAIN_S + 10
    finally:
        supervisor.stop()  # a no-op once stopped; otherwise the worker must not outlive a failed assert
        if orphan_pid.exists():
            os.kill(int(orphan_pid.read_text()), signal.SIGKILL)
