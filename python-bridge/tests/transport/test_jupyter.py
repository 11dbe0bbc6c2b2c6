"""lego_rl's notebook helpers on batches a TS sender really sent."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa

import lego_rl

from .processes import start_receiver, start_sender


def test_open_spool_reads_a_receiver_spool_and_the_frames_summarise_it(short_dir: Path, address: str) -> None:
    receiver = start_receiver(address, short_dir / "rx", short_dir)
    sender = start_sender(address, short_dir / "tx", short_dir, "--count", "7", "--per-batch", "3", "--tokens", "120", "--id-prefix", "j")
    sender.wait_for(lambda e: e["type"] == "done")
    receiver.stop()

    table = lego_rl.open_spool(short_dir / "rx")
    assert sorted(table.column("trajectory_id").to_pylist()) == sorted(f"j-{i}" for i in range(7))
    trajectories = lego_rl.trajectories_frame(table)
    assert list(trajectories.num_segments) == [1] * 7
    assert list(trajectories.num_tokens) == [120] * 7
    assert trajectories["metrics.turns"].tolist() == [4] * 7
    segments = lego_rl.segments_frame(table)
    assert len(segments) == 7
    assert (segments.num_trainable == trajectories.num_trainable.to_numpy()).all()
    assert set(segments.seal_reason) == {"finished"}


def test_tap_returns_batches_a_live_receiver_accepts(short_dir: Path, address: str) -> None:
    tap_address = f"ipc://{short_dir}/tap.sock"
    receiver = start_receiver(address, short_dir / "rx", short_dir, "--tap", tap_address, "--consume-delay-ms", "20")
    tapped: list[pa.Table] = []
    # Subscribe first; the sender's start-up (a node process) gives the subscription time to land,
    # and 30 batches at 20 ms each leave a wide window even if it lands late.
    watcher = threading.Thread(target=lambda: tapped.append(lego_rl.tap(tap_address, n=2, timeout_s=60)))
    watcher.start()
    sender = start_sender(address, short_dir / "tx", short_dir, "--count", "30", "--per-batch", "1", "--id-prefix", "tap")
    watcher.join(timeout=90)
    sender.wait_for(lambda e: e["type"] == "done")
    receiver.stop()
    (table,) = tapped
    assert table.num_rows == 2
    assert all(i.startswith("tap-") for i in table.column("trajectory_id").to_pylist())
