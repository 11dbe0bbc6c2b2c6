"""Exact comparison of records: arrays compare by dtype and bytes, so NaN payloads count."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def record_differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Every place where `actual` differs from `expected`; empty when they are identical."""
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        if type(expected) is not type(actual):
            return [f"{path}: expected {type(expected).__name__}, got {type(actual).__name__}"]
        diffs: list[str] = []
        for field in dataclasses.fields(expected):
            diffs += record_differences(getattr(expected, field.name), getattr(actual, field.name), f"{path}.{field.name}")
        return diffs
    if isinstance(expected, np.ndarray) or isinstance(actual, np.ndarray):
        if not (isinstance(expected, np.ndarray) and isinstance(actual, np.ndarray)):
            return [f"{path}: expected {type(expected).__name__}, got {type(actual).__name__}"]
        if expected.dtype != actual.dtype or expected.shape != actual.shape:
            return [f"{path}: expected {expected.dtype}{expected.shape}, got {actual.dtype}{actual.shape}"]
        if expected.tobytes() != actual.tobytes():
            first = int(np.flatnonzero(expected.view(np.uint8) != actual.view(np.uint8))[0]) // expected.itemsize
            return [f"{path}[{first}]: expected {expected.reshape(-1)[first]!r}, got {actual.reshape(-1)[first]!r}"]
        return []
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(expected) != len(actual):
            return [f"{path}: expected a list of {len(expected)}, got {actual!r}"[:200]]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in record_differences(e, a, f"{path}[{i}]")]
    if type(expected) is not type(actual) or expected != actual:
        return [f"{path}: expected {expected!r}, got {actual!r}"]
    return []
