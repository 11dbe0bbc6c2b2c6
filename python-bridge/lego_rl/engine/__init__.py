"""Embedded inference engine: token ids in; token ids, logprobs and MoE routing out (see docs/model.md)."""

from typing import Any

from .engine import Engine, EngineConfig
from .sampling import choose_tokens, raw_logprobs
from .types import (
    EngineError,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    InvalidRequestError,
    SamplingParams,
    TokenEvent,
    UnknownRequestError,
    WeightUpdateError,
)

__all__ = [
    "ClientConnection",
    "Engine",
    "EngineConfig",
    "EngineError",
    "EngineServer",
    "EngineServerConfig",
    "FinishReason",
    "GenerationRequest",
    "GenerationResult",
    "InvalidRequestError",
    "SamplingParams",
    "TokenEvent",
    "UnknownRequestError",
    "WeightUpdateError",
    "choose_tokens",
    "raw_logprobs",
]

# The server (server.py, `python -m lego_rl.engine`) and its wires (wire.py, with the client's
# ClientConnection) are loaded on first use, so that importing the engine in-process does not
# pull in zmq and the Arrow codecs.
_SERVER = ("EngineServer", "EngineServerConfig")


def __getattr__(name: str) -> Any:
    if name in _SERVER:
        from . import server

        return getattr(server, name)
    if name == "ClientConnection":
        from . import wire

        return wire.ClientConnection
    raise AttributeError(f"module 'lego_rl.engine' has no attribute {name!r}")
