"""The receiver as a Ray actor: a TS sender delivers, the driver pulls batches through the actor."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .processes import start_sender


@pytest.mark.slow
def test_the_ray_actor_hands_out_every_batch_a_ts_sender_delivers(short_dir: Path, address: str) -> None:
    ray = pytest.importorskip("ray")
    from lego_rl.cluster.transport_actor import start_transport_actor

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        actor = start_transport_actor(address, str(short_dir / "rx"), credits=4)
        sender = start_sender(address, short_dir / "tx", short_dir, "--count", "9", "--per-batch", "3", "--id-prefix", "r")
        ids: list[str] = []
        while len(ids) < 9:
            result = ray.get(actor.next_batch.remote(30.0))
            assert result is not None, f"no batch within 30 s; got {ids}"
            header, batch = result
            assert header["num_trajectories"] == batch.num_rows
            ids += batch.column("trajectory_id").to_pylist()
        sender.wait_for(lambda e: e["type"] == "done")
        assert sorted(ids) == sorted(f"r-{i}" for i in range(9))
        assert ray.get(actor.stats.remote())["accepted"] == 3
        ray.get(actor.close.remote())
    finally:
        ray.shutdown()
