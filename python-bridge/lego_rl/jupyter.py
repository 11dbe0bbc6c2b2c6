"""Reading rollout batches in a notebook: spooled or live, as pyarrow Tables or pandas frames.

    table = lego_rl.open_spool("runs/rx")          # every batch in a spool folder
    table = lego_rl.tap("tcp://trainer:5556", n=4) # the next 4 batches a receiver accepts
    lego_rl.trajectories_frame(table)              # one row per trajectory
    lego_rl.segments_frame(table)                  # one row per segment

Tables keep the Arrow layout of schemas/records.toml (segments nested as
list<struct>); the frames hold only scalar summaries, so a notebook stays
light even when the token columns are large.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lego_rl.schema import decode_batch
from lego_rl.transport import SPOOL_SUFFIX as SUFFIX
from lego_rl.transport import TapTimeoutError, read_spool_file

if TYPE_CHECKING:
    import pandas as pd


def _table(batches: list[pa.RecordBatch]) -> pa.Table:
    if not batches:
        raise ValueError("no batches to make a table of")
    # Batches of different routing shapes differ only in metadata and routing element type.
    tables = [pa.Table.from_batches([b]) for b in batches]
    return pa.concat_tables(tables, promote_options="permissive")


def spool_files(path: str | os.PathLike[str]) -> list[Path]:
    """The batch files of a spool folder (a sender spool, a receiver spool or its batches/ folder), oldest first."""
    root = Path(path)
    files = sorted(p for p in root.rglob(f"*{SUFFIX}") if "quarantine" not in p.relative_to(root).parts)
    return sorted(files, key=lambda p: (p.stat().st_mtime_ns, p.name))


def open_spool(path: str | os.PathLike[str]) -> pa.Table:
    """Every trajectory in a spool folder as one Table (columns are views over the mapped files)."""
    files = spool_files(path)
    if not files:
        raise FileNotFoundError(f"no {SUFFIX} batch files under {path}")
    return _table([decode_batch(read_spool_file(f).payload, expect="Trajectory").batch for f in files])


def tap(address: str, n: int = 1, timeout_s: float = 30.0) -> pa.Table:
    """Subscribes to a receiver's tap address (`--tap`) and returns the next `n` batches it accepts.

    A tap is best effort: it sees batches accepted after it connected, and a
    slow reader may miss some; it never slows the trainer down.
    """
    import zmq

    context = zmq.Context.instance()
    socket = context.socket(zmq.SUB)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.connect(address)
    batches: list[pa.RecordBatch] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(batches) < n:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not socket.poll(left_ms):
                raise TapTimeoutError(f"tap {address}: saw {len(batches)} of {n} batches within {timeout_s} s")
            frames = socket.recv_multipart(copy=False)
            if len(frames) == 2:
                batches.append(decode_batch(pa.py_buffer(frames[1].buffer), expect="Trajectory").batch)
    finally:
        socket.close(linger=0)
    return _table(batches)


def _list_lengths(array: pa.Array) -> np.ndarray:
    return pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)


def trajectories_frame(table: pa.Table) -> pd.DataFrame:
    """One row per trajectory: ids, status, reward, metrics, segment and token counts."""
    segments = segments_frame(table)
    frame = table.select(["trajectory_id", "group_id", "task_id", "harness", "status", "reward", "attempt", "error"]).to_pandas()
    metrics = pa.Table.from_struct_array(table.column("metrics").combine_chunks()).to_pandas()
    frame = frame.join(metrics.add_prefix("metrics."))
    totals = segments.groupby("trajectory_index")[["num_tokens", "num_trainable"]].sum()
    frame["num_segments"] = _list_lengths(table.column("segments").combine_chunks())
    frame["num_tokens"] = totals["num_tokens"].reindex(range(len(frame)), fill_value=0).to_numpy()
    frame["num_trainable"] = totals["num_trainable"].reindex(range(len(frame)), fill_value=0).to_numpy()
    frame["defense_flags"] = table.column("defense_flags").to_pylist()
    return frame


def segments_frame(table: pa.Table) -> pd.DataFrame:
    """One row per segment, with its trajectory's ids, status and reward, lengths and turn count."""
    import pandas as pd

    segments = table.column("segments").combine_chunks()
    values = segments.flatten()
    owner = pc.list_parent_indices(segments).to_numpy()
    parents = table.select(["trajectory_id", "group_id", "task_id", "status", "reward"]).take(pa.array(owner)).to_pandas()
    mask = values.field("loss_mask")
    mask_flat = mask.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = mask.offsets.to_numpy()
    sums = np.zeros(len(values), dtype=np.int64)
    if len(mask_flat):
        nonempty = np.diff(offsets) > 0
        sums[nonempty] = np.add.reduceat(mask_flat, offsets[:-1][nonempty])
    own = pd.DataFrame(
        {
            "segment_id": values.field("segment_id").to_pylist(),
            "thread": values.field("thread").to_pylist(),
            "thread_id": values.field("thread_id").to_pylist(),
            "seal_reason": values.field("seal_reason").to_pylist(),
            "num_tokens": _list_lengths(values.field("token_ids")),
            "num_trainable": sums,
            "num_turns": _list_lengths(values.field("turns")),
            "has_routing": values.field("routing").is_valid().to_numpy(zero_copy_only=False),
        }
    )
    frame = pd.concat([parents.reset_index(drop=True), own], axis=1)
    frame.insert(0, "trajectory_index", owner)
    return frame
