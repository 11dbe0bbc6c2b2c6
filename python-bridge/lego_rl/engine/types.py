"""Requests, streamed events, final results and errors of the embedded inference engine.

Shape legend: P prompt tokens, C completion tokens, L MoE layers, K experts per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch

FinishReason = Literal["stop", "length", "abort"]


class EngineError(Exception):
    """Base of every error the engine raises at its boundary."""


class InvalidRequestError(EngineError, ValueError):
    """A request field is out of range; `field` names it (dotted, e.g. 'sampling.max_tokens')."""

    def __init__(self, request_id: str, field_name: str, message: str) -> None:
        super().__init__(f"request {request_id!r}: field {field_name!r}: {message}")
        self.request_id = request_id
        self.field = field_name


class UnknownRequestError(EngineError, KeyError):
    """abort() named a request the engine is not running or queuing."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"no request {request_id!r} is queued or running")
        self.request_id = request_id


class WeightUpdateError(EngineError, ValueError):
    """update_weights() got tensors that do not fit the model, or a version that does not increase."""


@dataclass(kw_only=True, slots=True, frozen=True)
class SamplingParams:
    """How to pick each next token."""

    temperature: float = 1.0
    """Divides logits before sampling; 0 means greedy (argmax, no randomness)."""
    top_p: float = 1.0
    """Nucleus sampling: sample from the smallest top set with mass >= top_p (1 = off)."""
    max_tokens: int = 256
    """Completion tokens at most; generation also stops at the model's context length."""
    stop_token_ids: tuple[int, ...] = ()
    """Sampling one of these ends the completion (the stop token is part of it)."""
    seed: int | None = None
    """Seeds this request's own torch.Generator; None draws a fresh seed (reported in the result)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class GenerationRequest:
    """One completion of one prompt."""

    request_id: str
    """Caller-chosen id, unique among queued and running requests."""
    prompt_token_ids: tuple[int, ...]
    """The prompt, already tokenized (the proxy owns the chat template)."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    """Sampling parameters."""

    def validate(self, *, vocab_size: int, max_context: int) -> None:
        """Raise InvalidRequestError naming the first bad field."""
        rid, s = self.request_id, self.sampling
        if not self.prompt_token_ids:
            raise InvalidRequestError(rid, "prompt_token_ids", "prompt is empty")
        for pos, tok in enumerate(self.prompt_token_ids):
            if not 0 <= tok < vocab_size:
                raise InvalidRequestError(rid, "prompt_token_ids", f"id {tok} at position {pos} is outside the vocabulary 0..{vocab_size - 1}")
        if len(self.prompt_token_ids) >= max_context:
            raise InvalidRequestError(
                rid, "prompt_token_ids", f"prompt has {len(self.prompt_token_ids)} tokens; the context holds {max_context}, leaving no room to generate"
            )
        if s.max_tokens <= 0:
            raise InvalidRequestError(rid, "sampling.max_tokens", f"must be positive, got {s.max_tokens}")
        if not (s.temperature >= 0 and math.isfinite(s.temperature)):
            raise InvalidRequestError(rid, "sampling.temperature", f"must be a finite number >= 0, got {s.temperature}")
        if not 0 < s.top_p <= 1:
            raise InvalidRequestError(rid, "sampling.top_p", f"must be in (0, 1], got {s.top_p}")
        for tok in s.stop_token_ids:
            if not 0 <= tok < vocab_size:
                raise InvalidRequestError(rid, "sampling.stop_token_ids", f"id {tok} is outside the vocabulary 0..{vocab_size - 1}")


@dataclass(slots=True, frozen=True)
class TokenEvent:
    """One sampled token, streamed as soon as it exists."""

    request_id: str
    token_id: int
    logprob: float
    """log_softmax of the raw (untempered, untruncated) logits at token_id; see docs/model.md."""
    policy_version: int
    """Version of the weights that produced the logits."""


@dataclass(slots=True)
class GenerationResult:
    """A finished (or aborted) request: everything the proxy records for one turn."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    completion_token_ids: list[int]
    logprobs: torch.Tensor
    """[C] float32, as in TokenEvent.logprob."""
    prompt_routing: torch.Tensor
    """[P, L, K] int16: experts each prompt token used as input (prefill)."""
    completion_routing: torch.Tensor
    """[C - 1, L, K] int16: experts each completion token used when fed back as input. The
    last sampled token is never fed back, so it has no row (as in vLLM and SGLang); an
    aborted request likewise has rows only for the tokens already fed."""
    policy_versions: list[int]
    """Weight version that sampled each completion token (weights may change mid-request)."""
    finish_reason: FinishReason
    seed: int
    """The seed of this request's generator (the requested one, or the drawn one)."""
    cached_tokens: int = 0
    """Prompt tokens whose keys and values were copied, not computed: from the prefix cache, or
    from a request with the identical prompt prefilled alongside (vLLM's and OpenAI's `cached_tokens`)."""

    @property
    def policy_version(self) -> int:
        """Oldest weight version that contributed a token (-1 when none was sampled)."""
        return min(self.policy_versions, default=-1)
