"""Embedded inference engine: token ids in; token ids, logprobs and MoE routing out (see docs/model.md)."""

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
    "Engine",
    "EngineConfig",
    "EngineError",
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
