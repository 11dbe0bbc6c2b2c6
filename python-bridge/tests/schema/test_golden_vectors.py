"""Golden vectors: Python reads what TypeScript wrote and writes what it reads, both ways.

Arrow files from the two languages differ only in flatbuffer metadata layout
(each library lays out its own); the data buffers, the schema and the
metadata must be identical. msgpack control messages are byte-identical.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lego_rl.schema import batch_records, decode_batch, decode_control, encode_batch, encode_control, record_differences
from lego_rl.schema.vectors import arrow_cases, build_batch, build_message, load_cases, write_vectors

from ..conftest import REPO_ROOT

VECTORS = REPO_ROOT / "schemas" / "vectors"
CASES = load_cases()
COMMITTED = [(record, case) for record, case in arrow_cases(CASES) if case.get("commit", True)]
TSX = REPO_ROOT / "ts" / "node_modules" / ".bin" / "tsx"


def _ids(cases: list[tuple[str, dict]]) -> list[str]:
    return [case["name"] for _, case in cases]


@pytest.mark.parametrize(("record", "case"), COMMITTED, ids=_ids(COMMITTED))
def test_python_writer_reproduces_its_committed_vector_byte_for_byte(record: str, case: dict) -> None:
    rows, routing = build_batch(case, record)
    committed = (VECTORS / "py" / f"{case['name']}.arrow").read_bytes()
    assert encode_batch(record, rows, routing).to_pybytes() == committed, (
        "stale golden vector: run `.venv/bin/python -m lego_rl.schema.vectors write schemas/vectors/py`"
    )


@pytest.mark.parametrize(("record", "case"), COMMITTED, ids=_ids(COMMITTED))
def test_typescript_vector_decodes_to_exactly_the_expected_records(record: str, case: dict) -> None:
    decoded = decode_batch((VECTORS / "ts" / f"{case['name']}.arrow").read_bytes(), expect=record)
    expected, routing = build_batch(case, record)
    assert decoded.routing == routing
    assert record_differences(expected, batch_records(decoded)) == []


@pytest.mark.parametrize(("record", "case"), COMMITTED, ids=_ids(COMMITTED))
def test_both_languages_write_identical_schemas_and_values(record: str, case: dict) -> None:
    ts = decode_batch((VECTORS / "ts" / f"{case['name']}.arrow").read_bytes())
    py = decode_batch((VECTORS / "py" / f"{case['name']}.arrow").read_bytes())
    assert ts.batch.schema.equals(py.batch.schema, check_metadata=True)
    # Compared as bytes: RecordBatch.equals treats NaN != NaN, and NaN payloads must survive too.
    assert record_differences(batch_records(py), batch_records(ts)) == []


@pytest.mark.parametrize("case", CASES["messages"], ids=[c["name"] for c in CASES["messages"]])
def test_control_message_bytes_are_identical_across_languages(case: dict) -> None:
    ts_bytes = (VECTORS / "ts" / f"{case['name']}.msgpack").read_bytes()
    message = build_message(case)
    assert encode_control(message) == ts_bytes
    assert decode_control(ts_bytes) == message
    assert (VECTORS / "py" / f"{case['name']}.msgpack").read_bytes() == ts_bytes


@pytest.mark.slow
def test_a_131072_token_segment_with_48x8_routing_crosses_from_a_live_typescript_process(tmp_path: Path) -> None:
    subprocess.run(
        [str(TSX), "src/schema/vectors.ts", "write", str(tmp_path), "--case", "trajectories-131k"],
        cwd=REPO_ROOT / "ts",
        check=True,
        capture_output=True,
    )
    data = pa.memory_map(str(tmp_path / "trajectories-131k.arrow")).read_buffer()
    decoded = decode_batch(data, expect="Trajectory")
    case = next(c for r, c in arrow_cases(CASES) if c["name"] == "trajectories-131k")
    expected, _ = build_batch(case, "Trajectory")
    [trajectory] = batch_records(decoded)
    segment = trajectory.segments[0]
    assert segment.token_ids.size == 131072
    assert decoded.routing is not None and decoded.routing.view(segment.routing).shape == (131072, 48, 8)
    assert record_differences(expected, [trajectory]) == []


def test_vector_writer_cli_writes_every_committed_case(tmp_path: Path) -> None:
    written = {p.name for p in write_vectors(tmp_path, None, include_large=False)}
    assert written == {p.name for p in (VECTORS / "py").iterdir()}
    shutil.rmtree(tmp_path)


def test_decoded_token_logprob_and_routing_arrays_are_views_of_the_received_buffer() -> None:
    raw = (VECTORS / "ts" / "trajectories-qwen3-30b-shape.arrow").read_bytes()
    buffer = pa.py_buffer(raw)
    decoded = decode_batch(buffer)
    segment = batch_records(decoded)[0].segments[0]
    start, end = buffer.address, buffer.address + buffer.size
    for array in (segment.token_ids, segment.logprobs, segment.routing):
        assert array is not None
        address = array.__array_interface__["data"][0]
        assert start <= address and address + array.nbytes <= end, "array was copied out of the IPC buffer"
        assert not array.flags.owndata
    assert np.shares_memory(segment.routing, np.frombuffer(buffer, dtype=np.uint8))
