"""Bad input gets an error that names the problem; nothing is silently repaired."""

from __future__ import annotations

import dataclasses
import re

import msgpack
import numpy as np
import pyarrow as pa
import pytest

from lego_rl.schema import (
    SCHEMA_VERSION,
    Ack,
    ColumnTypeError,
    ControlMessageError,
    MissingColumnError,
    RecordShapeError,
    SchemaError,
    SchemaVersionError,
    TruncatedStreamError,
    batch_records,
    decode_batch,
    decode_control,
    encode_batch,
    encode_control,
    record_differences,
    trainable_problems,
)
from lego_rl.schema.generated import SCHEMA_MAJOR, Abort
from lego_rl.schema.vectors import build_batch, load_cases

CASES = load_cases()
MOE = next(c for c in CASES["trajectory_batches"] if c["name"] == "trajectories-moe-u8")


def _moe_rows():  # type: ignore[no-untyped-def]
    return build_batch(MOE, "Trajectory")


def _rewrite(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def test_a_stream_cut_anywhere_is_reported_as_truncated() -> None:
    rows, routing = _moe_rows()
    data = encode_batch("Trajectory", rows, routing).to_pybytes()
    for cut in (0, 7, len(data) // 3, len(data) // 2, len(data) - 8, len(data) - 1):
        with pytest.raises(TruncatedStreamError, match=f"{cut} bytes"):
            decode_batch(data[:cut])


def test_garbage_that_ends_like_a_stream_is_reported_as_corrupt() -> None:
    with pytest.raises(TruncatedStreamError, match="corrupt or truncated"):
        decode_batch(b"\x00" * 64 + b"\xff\xff\xff\xff\x00\x00\x00\x00")


def test_an_unknown_major_version_is_refused_naming_both_versions() -> None:
    rows, routing = _moe_rows()
    other = f"{SCHEMA_MAJOR + 1}.0.0"
    data = encode_batch("Trajectory", rows, routing, version=other)
    with pytest.raises(SchemaVersionError, match=rf"schema version {re.escape(other)}.*speaks {re.escape(SCHEMA_VERSION)}"):
        decode_batch(data)


def test_a_newer_minor_version_of_the_same_major_is_read() -> None:
    rows, routing = _moe_rows()
    newer = f"{SCHEMA_MAJOR}.99.0"
    decoded = decode_batch(encode_batch("Trajectory", rows, routing, version=newer))
    assert decoded.schema_version == newer


# The Trajectory columns schema 2.3 appended (records.toml: `since = "2.3"`).
COLUMNS_2_3 = ["tool_call_parse_failures", "tokens", "stage_seconds", "min_policy_version", "max_policy_version",
               "trainer_version_at_ship", "stale", "over_length"]


def _without_2_3_columns(version: str) -> bytes:
    rows, routing = _moe_rows()
    batch = decode_batch(encode_batch("Trajectory", rows, routing, version=version)).batch
    return _rewrite(batch.drop_columns(COLUMNS_2_3).replace_schema_metadata(batch.schema.metadata))


def test_a_batch_written_before_a_minor_release_reads_the_columns_it_added_as_null() -> None:
    decoded = decode_batch(_without_2_3_columns(f"{SCHEMA_MAJOR}.2.0"))
    assert decoded.schema_version == f"{SCHEMA_MAJOR}.2.0"
    first = batch_records(decoded)[0]
    assert [getattr(first, name) for name in COLUMNS_2_3] == [None] * len(COLUMNS_2_3)
    assert first.metrics.tool_calls == 1 and len(first.segments) == 3  # the columns it has are read as written


def test_a_batch_of_the_current_minor_missing_a_column_it_added_is_refused() -> None:
    with pytest.raises(MissingColumnError, match="no column 'tool_call_parse_failures'"):
        decode_batch(_without_2_3_columns(SCHEMA_VERSION))


def test_a_null_struct_round_trips_as_none_beside_set_ones() -> None:
    rows, routing = _moe_rows()
    assert rows[0].over_length is not None and rows[1].over_length is None
    back = batch_records(decode_batch(encode_batch("Trajectory", rows, routing)))
    assert record_differences(rows[0].over_length, back[0].over_length) == [] and back[1].over_length is None
    assert back[1].stage_seconds.agent is None and back[1].stage_seconds.setup == 0.5


def test_version_and_over_length_fields_that_contradict_each_other_are_refused() -> None:
    cases = [
        ({"max_policy_version": None}, "must both be set or both null"),
        ({"min_policy_version": 9, "max_policy_version": 8}, "min_policy_version 9 is above max_policy_version 8"),
        ({"trainer_version_at_ship": None}, "stale is true but min_policy_version or trainer_version_at_ship is null"),
        ({"over_length": dataclasses.replace(_moe_rows()[0][0].over_length, tokens=10)}, "10 tokens over a limit of 2048"),
        ({"over_length": dataclasses.replace(_moe_rows()[0][0].over_length, action="dropped")}, "an over-length drop ships no segments and no reward"),
    ]
    for change, message in cases:
        rows, routing = _moe_rows()
        for name, value in change.items():
            setattr(rows[0], name, value)
        with pytest.raises(RecordShapeError, match=re.escape(message)):
            encode_batch("Trajectory", rows, routing)


def test_a_missing_required_column_is_named() -> None:
    rows, routing = _moe_rows()
    batch = decode_batch(encode_batch("Trajectory", rows, routing)).batch
    without = batch.drop_columns(["status"]).replace_schema_metadata(batch.schema.metadata)
    with pytest.raises(MissingColumnError, match="no column 'status'"):
        decode_batch(_rewrite(without))


def test_a_column_of_the_wrong_type_is_named() -> None:
    rows, routing = _moe_rows()
    batch = decode_batch(encode_batch("Trajectory", rows, routing)).batch
    index = batch.schema.get_field_index("attempt")
    retyped = batch.set_column(index, pa.field("attempt", pa.int64(), nullable=False), batch.column("attempt").cast(pa.int64()))
    with pytest.raises(ColumnTypeError, match="Trajectory.attempt is int64"):
        decode_batch(_rewrite(retyped.replace_schema_metadata(batch.schema.metadata)))


def test_routing_whose_length_is_not_tokens_times_layers_times_top_k_is_refused() -> None:
    rows, routing = _moe_rows()
    segment = rows[0].segments[0]
    segment.routing = segment.routing[:-1]
    expected = "segment 'seg-main-0': routing has 183 values; expected tokens x layers x top_k = 23 x 4 x 2 = 184"
    with pytest.raises(RecordShapeError, match=expected):
        encode_batch("Trajectory", rows, routing)
    with pytest.raises(RecordShapeError, match=expected):
        decode_batch(encode_batch("Trajectory", rows, routing, validate=False))


def test_logprobs_that_do_not_match_the_tokens_are_refused() -> None:
    rows, routing = _moe_rows()
    rows[0].segments[1].logprobs = rows[0].segments[1].logprobs[:3]
    with pytest.raises(RecordShapeError, match="segment 'seg-title': logprobs has 3 values for 6 tokens"):
        decode_batch(encode_batch("Trajectory", rows, routing, validate=False))


def test_a_trainable_token_the_policy_did_not_sample_is_refused() -> None:
    rows, routing = _moe_rows()
    rows[0].segments[0].loss_mask[0] = 1
    with pytest.raises(RecordShapeError, match="token 0 has loss_mask 1 but was not sampled"):
        decode_batch(encode_batch("Trajectory", rows, routing, validate=False))


def test_an_expert_id_beyond_the_model_is_refused() -> None:
    rows, routing = _moe_rows()
    rows[0].segments[0].routing[0] = 8
    with pytest.raises(RecordShapeError, match="expert id 8 but the model has 8 experts"):
        decode_batch(encode_batch("Trajectory", rows, routing, validate=False))


def test_an_unknown_status_is_refused_when_encoding() -> None:
    rows, routing = _moe_rows()
    rows[0].status = "succeeded"
    with pytest.raises(SchemaError, match="status='succeeded' is not one of"):
        encode_batch("Trajectory", rows, routing)


def test_nan_and_infinite_logprobs_are_preserved_bit_exactly_but_cannot_train() -> None:
    rows, routing = _moe_rows()
    decoded = decode_batch(encode_batch("Trajectory", rows, routing))
    logprobs = batch_records(decoded)[0].segments[0].logprobs
    assert np.isnan(logprobs[10]) and logprobs[11] == np.inf and logprobs[12] == -np.inf
    assert logprobs.tobytes() == rows[0].segments[0].logprobs.tobytes()
    assert trainable_problems(decoded.batch) == [
        "3 trainable token(s) have a non-finite rollout logprob (NaN or inf)"
    ]


def test_a_finite_batch_may_train() -> None:
    rows, routing = build_batch(next(c for c in CASES["trajectory_batches"] if c["name"] == "trajectories-u16"), "Trajectory")
    assert trainable_problems(decode_batch(encode_batch("Trajectory", rows, routing)).batch) == []


def test_control_frames_that_are_not_msgpack_maps_are_refused() -> None:
    with pytest.raises(ControlMessageError, match="not valid msgpack"):
        decode_control(b"\xc1")
    with pytest.raises(ControlMessageError, match="must be a msgpack map, got list"):
        decode_control(msgpack.packb([1, 2]))


def test_a_control_message_of_unknown_kind_is_refused_listing_the_known_kinds() -> None:
    with pytest.raises(ControlMessageError, match=r"unknown control message kind 'nack'; known: \['abort', 'ack'"):
        decode_control(msgpack.packb({"kind": "nack"}))


def test_a_control_message_from_a_newer_minor_reads_past_its_new_keys_and_one_from_an_older_minor_reads_its_missing_ones_as_none() -> None:
    # A 2.4 client's generate reaches a 2.3 engine with a key that engine does not know, and the reverse.
    newer = {"kind": "abort", "request_id": "r", "from_a_later_minor": True}
    assert decode_control(msgpack.packb(newer)) == Abort(request_id="r")
    older = {"kind": "generate", "request_id": "r", "model": None, "policy_version": None, "prompt_token_ids": b"\x01\x00\x00\x00",
             "temperature": 0.0, "top_p": 1.0, "max_tokens": 1, "stop_token_ids": b"", "seed": None, "stream": True}
    assert decode_control(msgpack.packb(older, use_bin_type=True)).final_tokens_in_result is None


def test_a_control_message_with_a_missing_or_mistyped_field_is_refused() -> None:
    with pytest.raises(ControlMessageError, match="Ack.batch_id is required"):
        decode_control(msgpack.packb({"kind": "ack", "status": "accepted", "reason": None}))
    with pytest.raises(ControlMessageError, match="Credit.credits must be int, got str"):
        decode_control(msgpack.packb({"kind": "credit", "receiver_id": "r", "credits": "16", "max_batch_bytes": 1}))


def test_control_integers_beyond_2_to_53_are_refused_rather_than_rounded() -> None:
    header = decode_control(encode_control(Ack(batch_id="b", status="accepted", reason=None)))
    assert dataclasses.asdict(header) == {"batch_id": "b", "status": "accepted", "reason": None}
    from lego_rl.schema import WeightVersion

    with pytest.raises(ControlMessageError, match="exceeds the"):
        encode_control(WeightVersion(version=2**53 + 1, published_at_ms=0.0, checkpoint_path=None))


def test_packed_arrays_refuse_values_outside_their_element_type_and_ragged_bins() -> None:
    from lego_rl.schema.generated import TokenChunk

    def chunk(ids: object) -> TokenChunk:
        return TokenChunk(request_id="r", token_ids=ids, logprobs=np.zeros(1, np.float32), policy_version=0)  # type: ignore[arg-type]

    with pytest.raises(ControlMessageError, match=r"TokenChunk.token_ids holds 1099511627776..1099511627776, outside int32"):
        encode_control(chunk(np.array([2**40])))
    with pytest.raises(ControlMessageError, match="must hold int32 values, got dtype float64"):
        encode_control(chunk([1.5]))
    wire = msgpack.unpackb(encode_control(chunk([1, 2])))
    with pytest.raises(ControlMessageError, match="has 7 bytes, not a whole number of int32 values"):
        decode_control(msgpack.packb({**wire, "token_ids": b"\x00" * 7}))
    with pytest.raises(ControlMessageError, match="must be a msgpack bin of little-endian int32, got list"):
        decode_control(msgpack.packb({**wire, "token_ids": [1, 2]}))
