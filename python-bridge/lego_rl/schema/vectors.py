"""Golden vectors: expands schemas/vectors/cases.json into records and writes them.

The expansion formulas are specified in schemas/vectors/README.md and mirrored
in ts/src/schema/vectors.ts; both sides must produce the same values.

    python -m lego_rl.schema.vectors write DIR [--case NAME ...] [--include-large]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from . import generated as g
from .arrow_codec import encode_batch
from .control_codec import encode_control
from .routing import RoutingShape

REPO = Path(__file__).resolve().parents[3]
CASES_PATH = REPO / "schemas" / "vectors" / "cases.json"
_SPECIAL = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}
VOCAB = 151643


def load_cases() -> dict[str, Any]:
    return json.loads(CASES_PATH.read_text(encoding="utf-8"))


def token_ids(seed: int, index: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
    return ((seed * 7919 + index * 104729) % VOCAB).astype(np.int32)


def sampled_logprobs(seed: int, index: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    # k/64 is exact in float32, so both languages produce identical bits; (0 - k)
    # rather than -k keeps k = 0 a positive zero in JavaScript too.
    return ((0 - (seed * 31 + index * 17) % 1024) / 64).astype(np.float32)


def routing_values(seed: int, index: npt.NDArray[np.int64], shape: RoutingShape) -> npt.NDArray[np.unsignedinteger]:
    layer = np.arange(shape.layers, dtype=np.int64)[None, :, None]
    slot = np.arange(shape.top_k, dtype=np.int64)[None, None, :]
    values = (seed * 13 + index[:, None, None] * 7 + layer * 5 + slot * 3) % shape.num_experts
    return values.astype(shape.numpy_dtype).reshape(-1)


def _apply_overrides(logprobs: npt.NDArray[np.float32], overrides: dict[str, Any]) -> None:
    for index, value in overrides.items():
        logprobs[int(index)] = _SPECIAL[value] if isinstance(value, str) else value


def _routing_shape(spec: dict[str, int] | None) -> RoutingShape | None:
    return RoutingShape(**spec) if spec else None


def build_segment(spec: dict[str, Any], shape: RoutingShape | None) -> g.Segment:
    provenance_parts, spans, cursor = [], [], 0
    for turn in spec["turns"]:
        start = cursor + turn["prompt"]
        end = start + turn["completion"]
        cursor = end + turn["tail"]
        provenance_parts += [
            np.full(turn["prompt"], g.TokenProvenance.PROMPT, np.uint8),
            np.full(turn["completion"], g.TokenProvenance.SAMPLED, np.uint8),
            np.full(turn["tail"], g.TokenProvenance.TEMPLATE, np.uint8),
        ]
        spans.append(
            g.TurnSpan(
                turn_id=turn["turn_id"],
                completion_start=start,
                completion_end=end,
                policy_version=turn["policy_version"],
                finish_reason=turn["finish_reason"],
            )
        )
    provenance = np.concatenate(provenance_parts) if provenance_parts else np.zeros(0, np.uint8)
    index = np.arange(cursor, dtype=np.int64)
    sampled = provenance == g.TokenProvenance.SAMPLED
    logprobs = np.where(sampled, sampled_logprobs(spec["seed"], index), np.float32(0)).astype(np.float32)
    _apply_overrides(logprobs, spec.get("logprob_overrides", {}))
    recorded = None
    if shape:
        recorded = np.ones(cursor, np.uint8)
        recorded[spec.get("routing_unrecorded", [])] = 0
    return g.Segment(
        segment_id=spec["segment_id"],
        thread=spec["thread"],
        thread_id=spec["thread_id"],
        seal_reason=spec["seal_reason"],
        token_ids=token_ids(spec["seed"], index),
        logprobs=logprobs,
        loss_mask=sampled.astype(np.uint8),
        provenance=provenance,
        routing=routing_values(spec["seed"], index, shape) if shape else None,
        routing_recorded=recorded,
        turns=spans,
    )


# Struct-valued fields of a Trajectory spec other than segments (null in the spec stays None).
_NESTED = {"metrics": g.TrajectoryMetrics, "tokens": g.TokenCounts, "stage_seconds": g.StageSeconds, "over_length": g.OverLength}


def build_trajectory(spec: dict[str, Any], shape: RoutingShape | None) -> g.Trajectory:
    fields = {k: v for k, v in spec.items() if k != "segments"}
    for name, cls in _NESTED.items():
        if fields.get(name) is not None:
            fields[name] = cls(**fields[name])
    return g.Trajectory(**fields, segments=[build_segment(s, shape) for s in spec["segments"]])


def build_turn(spec: dict[str, Any], shape: RoutingShape | None) -> g.Turn:
    seed, prompt, completion = spec["seed"], spec["prompt"], spec["completion"]
    prompt_index = np.arange(prompt, dtype=np.int64)
    completion_index = np.arange(prompt, prompt + completion, dtype=np.int64)
    logprobs = sampled_logprobs(seed, np.arange(completion, dtype=np.int64))
    _apply_overrides(logprobs, spec.get("logprob_overrides", {}))
    return g.Turn(
        turn_id=spec["turn_id"],
        session_id=spec["session_id"],
        thread_id=spec["thread_id"],
        prompt_ids=token_ids(seed, prompt_index),
        completion_ids=token_ids(seed, completion_index),
        logprobs=logprobs,
        routing=routing_values(seed, completion_index, shape) if shape else None,
        prompt_routing=routing_values(seed, prompt_index, shape) if shape and spec["prompt_routing"] else None,
        policy_version=spec["policy_version"],
        finish_reason=spec["finish_reason"],
        timings=g.TurnTimings(**spec["timings"]),
    )


def build_batch(case: dict[str, Any], record: str) -> tuple[list[Any], RoutingShape | None]:
    shape = _routing_shape(case["routing"])
    build = build_trajectory if record == "Trajectory" else build_turn
    return [build(row, shape) for row in case["rows"]], shape


def build_message(case: dict[str, Any]) -> g.ControlMessage:
    """`array<T>` fields are JSON lists in cases.json (floats may be "nan", "inf", "-inf")."""
    fields = dict(case["message"])
    kind = fields.pop("kind")
    for desc in g.MESSAGE_FIELDS[kind]:
        if desc.kind == "array" and isinstance(fields.get(desc.name), list):
            values = [float(v) if isinstance(v, str) else v for v in fields[desc.name]]
            fields[desc.name] = np.array(values, dtype=np.dtype(desc.element).newbyteorder("<"))
    return g.MESSAGE_CLASSES[kind](**fields)


def arrow_cases(cases: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(record name, case) for every Arrow case."""
    return [("Trajectory", c) for c in cases["trajectory_batches"]] + [("Turn", c) for c in cases["turn_batches"]]


def write_vectors(out: Path, names: set[str] | None, include_large: bool) -> list[Path]:
    cases = load_cases()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for record, case in arrow_cases(cases):
        if (names and case["name"] not in names) or (not names and not include_large and case.get("commit") is False):
            continue
        rows, shape = build_batch(case, record)
        path = out / f"{case['name']}.arrow"
        path.write_bytes(encode_batch(record, rows, shape).to_pybytes())
        written.append(path)
    for case in cases["messages"]:
        if names and case["name"] not in names:
            continue
        path = out / f"{case['name']}.msgpack"
        path.write_bytes(encode_control(build_message(case)))
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.schema.vectors")
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="write golden vectors into DIR")
    write.add_argument("dir", type=Path)
    write.add_argument("--case", action="append", help="only this case (repeatable)")
    write.add_argument("--include-large", action="store_true", help="also cases marked commit: false")
    args = parser.parse_args(argv)
    for path in write_vectors(args.dir, set(args.case) if args.case else None, args.include_large):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
