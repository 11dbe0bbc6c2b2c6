"""Batches for receiver tests, built from the golden-vector cases (schemas/vectors/cases.json)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from lego_rl.schema import BatchHeader, Heartbeat, SCHEMA_VERSION, encode_batch, encode_control
from lego_rl.schema.vectors import build_batch, load_cases


def golden_rows(name: str = "trajectories-moe-u8") -> tuple[list[Any], Any]:
    case = next(c for c in load_cases()["trajectory_batches"] if c["name"] == name)
    return build_batch(case, "Trajectory")


def payload(rows: list[Any] | None = None, shape: Any = None, *, version: str = SCHEMA_VERSION, validate: bool = True) -> bytes:
    if rows is None:
        rows, shape = golden_rows()
    return encode_batch("Trajectory", rows, shape, version=version, validate=validate).to_pybytes()


def header(batch_id: str, data: bytes, num_trajectories: int = 2, seq: int = 0) -> bytes:
    return encode_control(
        BatchHeader(
            batch_id=batch_id,
            producer_id="test",
            seq=seq,
            schema_version=SCHEMA_VERSION,
            created_at_ms=time.time() * 1000,
            num_trajectories=num_trajectories,
            num_tokens=0,
            payload_bytes=len(data),
        )
    )


def hello() -> bytes:
    return encode_control(Heartbeat(sender_id="test", role="sender", sent_at_ms=time.time() * 1000))


def inconsistent_rows() -> tuple[list[Any], Any]:
    """A first segment whose logprobs are one shorter than its tokens."""
    rows, shape = golden_rows()
    segment = rows[0].segments[0]
    rows[0].segments[0] = dataclasses.replace(segment, logprobs=np.asarray(segment.logprobs)[:-1].copy())
    return rows, shape
