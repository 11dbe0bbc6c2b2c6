"""lego_rl: the Python half of lego-rl (receiver, model, engine, trainer)."""

from __future__ import annotations

from typing import Any

# Notebook helpers (lego_rl/jupyter.py), loaded on first use so that importing
# lego_rl for the model or the engine does not pull in pyarrow, pandas and zmq.
_JUPYTER = ("open_spool", "tap", "trajectories_frame", "segments_frame")


def __getattr__(name: str) -> Any:
    if name in _JUPYTER:
        from . import jupyter

        return getattr(jupyter, name)
    raise AttributeError(f"module 'lego_rl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_JUPYTER])
