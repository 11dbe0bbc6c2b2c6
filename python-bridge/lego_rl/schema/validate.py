"""Structural validation of decoded batches, vectorized over the flat buffers.

Decoding preserves values bit for bit (NaN and infinities included): the wire
is a recorder, and a NaN logprob is evidence the monitor must see. Whether a
batch may *train* is a separate question answered by `trainable_problems`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from . import generated as g
from .errors import RecordShapeError
from .routing import RoutingShape

_SAMPLED = int(g.TokenProvenance.SAMPLED)


def _lengths(array: pa.ListArray) -> npt.NDArray[np.int64]:
    return np.diff(array.offsets.to_numpy()).astype(np.int64)


def _check_nulls(record: str, struct_fields: list[pa.Field], arrays: list[pa.Array], path: str) -> None:
    for field, array in zip(struct_fields, arrays):
        where = f"{path}.{field.name}"
        if not field.nullable and array.null_count:
            raise RecordShapeError(f"{where} is required but {array.null_count} row(s) hold null")
        if pa.types.is_struct(field.type):
            # Under a null struct its children hold filler, not data: check only the rows that are set.
            children = array.flatten()
            if array.null_count:
                children = [child.filter(array.is_valid()) for child in children]
            _check_nulls(record, list(field.type), children, where)
        elif pa.types.is_list(field.type) and pa.types.is_struct(field.type.value_type):
            inner = array.values
            _check_nulls(record, list(field.type.value_type), inner.flatten(), f"{where}[]")


def _check_enum(values: pa.Array, allowed: tuple[str, ...], where: str) -> None:
    # The distinct values are a handful whatever the batch size: one kernel, then a set test.
    if set(pc.unique(values).to_pylist()) <= set(allowed):
        return
    bad = pc.invert(pc.is_in(values, value_set=pa.array(allowed)))
    index = pc.index(bad, True).as_py()
    if index < 0:
        return  # only nulls were outside the set, and is_in let them pass
    raise RecordShapeError(f"{where}[{index}]={values[index].as_py()!r} is not one of {allowed}")


def _first(mask: npt.NDArray[np.bool_]) -> int:
    return int(np.flatnonzero(mask)[0])


def _validate_segments(segments: pa.StructArray, owners: list[str], routing: RoutingShape | None) -> None:
    """`owners[i]` names the trajectory of segment i, for error messages."""
    cols = dict(zip([f.name for f in segments.type], segments.flatten()))
    ids = cols["segment_id"]

    def where(i: int) -> str:
        return f"trajectory {owners[i]!r} segment {ids[i].as_py()!r}"

    _check_enum(cols["thread"], g.SEGMENT_THREAD_VALUES, "Segment.thread")
    _check_enum(cols["seal_reason"], g.SEAL_REASON_VALUES, "Segment.seal_reason")
    tokens = _lengths(cols["token_ids"])
    for name in ("logprobs", "loss_mask", "provenance"):
        bad = _lengths(cols[name]) != tokens
        if bad.any():
            i = _first(bad)
            raise RecordShapeError(f"{where(i)}: {name} has {_lengths(cols[name])[i]} values for {tokens[i]} tokens")
    _validate_routing(cols["routing"], tokens, routing, where, "tokens")
    routing_null = cols["routing"].is_null().to_numpy(zero_copy_only=False)
    recorded = cols["routing_recorded"]
    recorded_null = recorded.is_null().to_numpy(zero_copy_only=False)
    if (routing_null != recorded_null).any():
        i = _first(routing_null != recorded_null)
        raise RecordShapeError(f"{where(i)}: routing_recorded must be null exactly when routing is null")
    bad = (~recorded_null) & (_lengths(recorded) != tokens)
    if bad.any():
        i = _first(bad)
        raise RecordShapeError(f"{where(i)}: routing_recorded has {_lengths(recorded)[i]} values for {tokens[i]} tokens")

    mask = cols["loss_mask"].values.to_numpy()
    provenance = cols["provenance"].values.to_numpy()
    if mask.size and mask.max() > 1:
        raise RecordShapeError(f"Segment.loss_mask holds {mask.max()}; only 0 and 1 are allowed")
    if provenance.size and provenance.max() > _SAMPLED:
        raise RecordShapeError(f"Segment.provenance holds {provenance.max()}; TokenProvenance is 0..{_SAMPLED}")
    trained_unsampled = (mask == 1) & (provenance != _SAMPLED)
    if trained_unsampled.any():
        token = _first(trained_unsampled)
        seg = int(np.searchsorted(cols["loss_mask"].offsets.to_numpy(), token, side="right") - 1)
        raise RecordShapeError(
            f"{where(seg)}: token {token - cols['loss_mask'].offsets[seg].as_py()} has loss_mask 1 "
            "but was not sampled by the policy; only sampled tokens may train"
        )

    spans = cols["turns"]
    span_cols = dict(zip([f.name for f in spans.type.value_type], spans.values.flatten()))
    _check_enum(span_cols["finish_reason"], g.FINISH_REASON_VALUES, "TurnSpan.finish_reason")
    span_owner = np.repeat(np.arange(len(spans)), _lengths(spans))
    start = span_cols["completion_start"].to_numpy()
    end = span_cols["completion_end"].to_numpy()
    bad = (start < 0) | (end < start) | (end > tokens[span_owner])
    if bad.any():
        i = _first(bad)
        raise RecordShapeError(
            f"{where(int(span_owner[i]))}: turn span [{start[i]}, {end[i]}) lies outside its "
            f"{tokens[span_owner[i]]} tokens"
        )


def _validate_routing(column: pa.ListArray, tokens: npt.NDArray[np.int64], routing: RoutingShape | None, where, unit: str) -> None:  # type: ignore[no-untyped-def]
    null = column.is_null().to_numpy(zero_copy_only=False)
    if routing is None:
        if not null.all():
            raise RecordShapeError(f"{where(_first(~null))}: holds routing but the batch metadata declares a dense model")
        return
    bad = (~null) & (_lengths(column) != tokens * routing.per_token)
    if bad.any():
        i = _first(bad)
        raise RecordShapeError(
            f"{where(i)}: routing has {_lengths(column)[i]} values; expected {unit} x layers x top_k = "
            f"{tokens[i]} x {routing.layers} x {routing.top_k} = {tokens[i] * routing.per_token}"
        )
    values = column.values.to_numpy()
    if values.size and int(values.max()) >= routing.num_experts:
        raise RecordShapeError(f"routing holds expert id {int(values.max())} but the model has {routing.num_experts} experts")


def _validate_trajectories(batch: pa.RecordBatch, routing: RoutingShape | None) -> None:
    _check_enum(batch.column("status"), g.TRAJECTORY_STATUS_VALUES, "Trajectory.status")
    segments = batch.column("segments")
    ids = batch.column("trajectory_id").to_pylist()
    owners = [ids[i] for i in np.repeat(np.arange(batch.num_rows), _lengths(segments))]
    _validate_segments(segments.values, owners, routing)
    _validate_provenance(batch, ids, _lengths(segments))


def _validate_provenance(batch: pa.RecordBatch, ids: list[str], segments: npt.NDArray[np.int64]) -> None:
    """The 2.3 version and over-length fields agree with each other (the twin of validate.ts's validateProvenance).

    Per row in Python: a batch holds one group of trajectories, and these are a few scalars each.
    """
    lows = batch.column("min_policy_version").to_pylist()
    highs = batch.column("max_policy_version").to_pylist()
    ships = batch.column("trainer_version_at_ship").to_pylist()
    stale = batch.column("stale").to_pylist()
    rewards = batch.column("reward").to_pylist()
    over = batch.column("over_length")
    # Rows with no over_length hold filler or null there; only set ones are checked (below, with their row).
    _check_enum(over.field("action").filter(over.is_valid()).drop_null(), g.OVER_LENGTH_ACTION_VALUES, "Trajectory.over_length.action")
    for i, (low, high, ship, flagged, reward, cut) in enumerate(zip(lows, highs, ships, stale, rewards, over.to_pylist())):
        where = f"trajectory {ids[i]!r}"
        if (low is None) != (high is None):
            raise RecordShapeError(f"{where}: min_policy_version and max_policy_version must both be set or both null")
        if low is not None and low > high:
            raise RecordShapeError(f"{where}: min_policy_version {low} is above max_policy_version {high}")
        if flagged and (low is None or ship is None):
            raise RecordShapeError(
                f"{where}: stale is true but min_policy_version or trainer_version_at_ship is null (stale is judged from both)"
            )
        if cut is None:
            continue
        if cut["limit"] <= 0 or cut["tokens"] <= cut["limit"]:
            raise RecordShapeError(
                f"{where}: over_length says {cut['tokens']} tokens over a limit of {cut['limit']}; "
                "the original length must exceed a positive limit"
            )
        if cut["action"] == "dropped" and (segments[i] > 0 or reward is not None):
            raise RecordShapeError(
                f"{where}: an over-length drop ships no segments and no reward (so nothing trains on it); "
                f"it holds {segments[i]} segment(s), reward {reward}"
            )


def _validate_turns(batch: pa.RecordBatch, routing: RoutingShape | None) -> None:
    _check_enum(batch.column("finish_reason"), g.FINISH_REASON_VALUES, "Turn.finish_reason")
    ids = batch.column("turn_id")

    def where(i: int) -> str:
        return f"turn {ids[i].as_py()!r}"

    completion = _lengths(batch.column("completion_ids"))
    logprobs = _lengths(batch.column("logprobs"))
    if (logprobs != completion).any():
        i = _first(logprobs != completion)
        raise RecordShapeError(f"{where(i)}: {logprobs[i]} logprobs for {completion[i]} completion tokens")
    _validate_routing(batch.column("routing"), completion, routing, where, "completion tokens")
    _validate_routing(batch.column("prompt_routing"), _lengths(batch.column("prompt_ids")), routing, where, "prompt tokens")


def validate_batch(record: str, batch: pa.RecordBatch, routing: RoutingShape | None) -> None:
    """Raises RecordShapeError naming the first inconsistency of a decoded batch."""
    _check_nulls(record, list(batch.schema), batch.columns, record)
    if record == "Trajectory":
        _validate_trajectories(batch, routing)
    elif record == "Turn":
        _validate_turns(batch, routing)


def trainable_problems(batch: pa.RecordBatch) -> list[str]:
    """Reasons a structurally valid Trajectory batch must not train (empty when it may).

    A non-finite rollout logprob on a trainable token would poison the
    importance ratio; such batches are quarantined, never silently repaired.
    """
    problems = []
    segments = batch.column("segments").values
    cols = dict(zip([f.name for f in segments.type], segments.flatten()))
    logprobs = cols["logprobs"].values.to_numpy()
    mask = cols["loss_mask"].values.to_numpy().astype(bool)
    bad = mask & ~np.isfinite(logprobs)
    if bad.any():
        problems.append(f"{int(bad.sum())} trainable token(s) have a non-finite rollout logprob (NaN or inf)")
    positive = mask & np.isfinite(logprobs) & (logprobs > 0)
    if positive.any():
        problems.append(f"{int(positive.sum())} trainable token(s) have a logprob above 0")
    return problems
