"""Embedded inference engine: continuous batching over per-sequence KV caches.

1. The engine knows only token ids (the proxy owns chat templates and tokenizers).
2. Every `step()` is one forward pass over a packed batch: the prompts of newly admitted
   requests (prefill) and the last sampled token of each running request (decode). New
   requests therefore join between decode steps. A request finishes in the step that
   samples its last token: that token is never fed back, so it has no routing row (as in
   vLLM and SGLang). Feeding it once more would cost a forward pass per request and
   delay every reply by a step, for a row the trainer never needs: the last token's
   hidden state predicts nothing that is trained.
3. Every sequence owns a slot of one shared KV pool; decode steps attend in one call per
   layer over the pool (shorter sequences masked), prefills per sequence. Masked keys weigh
   exactly 0 and the dense/expert math is row-wise, so batch neighbours change a request's
   logits only by rounding (~1e-7; CPU kernels differ by row count). Each request samples from its own seeded
   uniform stream, so a seed reproduces a completion under any load.
   Requests admitted in the same step with an identical prompt (a GRPO group's G copies)
   prefill it once; the others copy its keys, routing rows and first-token logits, then
   sample from their own streams.
4. Single-threaded: the network layer calls submit/abort/update_weights/step from one
   loop; `update_weights` between steps bumps the policy version, and tokens sampled
   afterwards carry the new version (in-flight caches keep the keys already computed).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from lego_rl.model import KVCache, KVPool, MoeForCausalLM, load_model
from lego_rl.model.checkpoint import CheckpointError, load_state

from .sampling import UniformStream, choose_tokens, raw_logprobs
from .types import (
    FinishReason,
    GenerationRequest,
    GenerationResult,
    InvalidRequestError,
    TokenEvent,
    UnknownRequestError,
    WeightUpdateError,
)

# First size of the shared KV pool; it doubles in slots and positions as needed.
_INITIAL_POOL_SLOTS = 8
_INITIAL_POOL_POSITIONS = 512

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(kw_only=True, slots=True, frozen=True)
class EngineConfig:
    """Scheduling and numeric settings of one engine replica."""

    max_running: int = 64
    """Requests decoding at once; more wait in a FIFO queue."""
    max_batch_tokens: int = 8192
    """Tokens per forward pass; bounds how many prompts one step prefills (one always fits)."""
    max_context: int | None = None
    """Prompt + completion limit; None = the model's max_position_embeddings."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Weights and activations; logprobs are always computed in fp32 from the logits."""
    device: str = "cpu"
    """Torch device of the model, caches and generators."""

    def __post_init__(self) -> None:
        if self.max_running < 1 or self.max_batch_tokens < 1:
            raise ValueError(f"max_running and max_batch_tokens must be >= 1, got {self.max_running}, {self.max_batch_tokens}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")


@dataclass(slots=True)
class _Sequence:
    request: GenerationRequest
    cache: KVCache
    uniforms: UniformStream
    seed: int
    budget: int
    """Completion tokens allowed: max_tokens clamped to the context left."""
    pending: list[int]
    """Tokens to feed on the next step: the prompt, then each sampled token."""
    completion: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    prompt_routing: torch.Tensor | None = None
    routing_rows: list[torch.Tensor] = field(default_factory=list)


class Engine:
    """Generates completions for token-id requests; see the module docstring."""

    def __init__(self, model: MoeForCausalLM, config: EngineConfig = EngineConfig(), *, policy_version: int = 0) -> None:
        self.config = config
        self.dtype = _DTYPES[config.dtype]
        self.model = model.to(device=config.device, dtype=self.dtype).eval()
        self.max_context = config.max_context or model.config.max_position_embeddings
        self.policy_version = policy_version
        # FIFO by insertion order, keyed by request id: submit's duplicate check and abort
        # stay O(1) however many requests a rollout worker queues.
        self._waiting: dict[str, GenerationRequest] = {}
        self._running: dict[str, _Sequence] = {}
        self._seed_source = random.Random()
        self._kv = KVPool(
            model.config, slots=_INITIAL_POOL_SLOTS, capacity=_INITIAL_POOL_POSITIONS, dtype=self.dtype, device=config.device
        )

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, config: EngineConfig = EngineConfig(), *, policy_version: int = 0) -> Engine:
        return cls(load_model(model_dir, dtype=_DTYPES[config.dtype], device=config.device), config, policy_version=policy_version)

    # ---- requests -------------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> None:
        """Queue a request; raises InvalidRequestError naming the bad field."""
        request.validate(vocab_size=self.model.config.vocab_size, max_context=self.max_context)
        rid = request.request_id
        if rid in self._running or rid in self._waiting:
            raise InvalidRequestError(rid, "request_id", "a request with this id is already queued or running")
        self._waiting[rid] = request

    def abort(self, request_id: str) -> GenerationResult:
        """Stop a request now and return what it produced so far (finish_reason 'abort')."""
        seq = self._running.pop(request_id, None)
        if seq is not None:
            return self._retire(seq, "abort")
        req = self._waiting.pop(request_id, None)
        if req is not None:
            return self._retire(self._start(req), "abort")
        raise UnknownRequestError(request_id)

    @property
    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def queued_request_ids(self) -> list[str]:
        """Requests waiting for admission, in FIFO order."""
        return list(self._waiting)

    # ---- weights --------------------------------------------------------------------

    def update_weights(self, tensors: Mapping[str, torch.Tensor], version: int, *, source: str | Path | None = None) -> None:
        """Load a full HF-named state dict (either expert layout) and move to `version`.

        Every tensor is checked (names, shapes, floating point) before any is copied, so a
        refused update leaves the weights as they were. `source` names them in errors.
        """
        if version <= self.policy_version:
            raise WeightUpdateError(f"policy version must increase: have {self.policy_version}, got {version}")
        try:
            load_state(self.model, dict(tensors), source=Path(source if source is not None else f"<weights v{version}>"))
        except CheckpointError as err:
            raise WeightUpdateError(str(err)) from err
        self.policy_version = version

    # ---- scheduling -----------------------------------------------------------------

    def _start(self, req: GenerationRequest) -> _Sequence:
        seed = req.sampling.seed if req.sampling.seed is not None else self._seed_source.randrange(2**63)
        prompt_len = len(req.prompt_token_ids)
        budget = min(req.sampling.max_tokens, self.max_context - prompt_len)
        return _Sequence(
            request=req,
            cache=self._kv.open(),
            uniforms=UniformStream(seed, self.config.device),
            seed=seed,
            budget=budget,
            pending=list(req.prompt_token_ids),
        )

    def _admit(self) -> None:
        tokens = sum(len(s.pending) for s in self._running.values())
        while self._waiting and len(self._running) < self.config.max_running:
            first = next(iter(self._waiting.values()))
            prompt_len = len(first.prompt_token_ids)
            if self._running and tokens + prompt_len > self.config.max_batch_tokens:
                break
            seq = self._start(self._waiting.pop(first.request_id))
            self._running[seq.request.request_id] = seq
            tokens += prompt_len

    @torch.inference_mode()
    def step(self) -> list[TokenEvent | GenerationResult]:
        """Admit what fits, run one forward pass, sample; returns this step's events."""
        self._admit()
        # In slot order, so the decode rows' keys are one view of the pool (attention.py).
        seqs = sorted(self._running.values(), key=lambda s: s.cache.slot)
        if not seqs:
            return []
        # Requests admitted together with the same prompt (a GRPO group's copies) prefill it
        # once: followers get the leader's keys, routing and first logits.
        leader_of = self._shared_prompts(seqs)
        fed = [i for i in range(len(seqs)) if i not in leader_of]
        lens = [len(seqs[i].pending) for i in fed]
        ends = (torch.tensor(lens).cumsum(0) - 1).tolist()
        out = self.model(
            torch.tensor([t for i in fed for t in seqs[i].pending], device=self.config.device),
            seq_lens=lens,
            caches=[seqs[i].cache for i in fed],
            return_routing=True,
            logits_rows=torch.tensor(ends, dtype=torch.int64, device=self.config.device),
        )
        routing_TLK = out.routing.cpu()
        starts = [end - n + 1 for end, n in zip(ends, lens)]
        position = {i: j for j, i in enumerate(fed)}
        for follower, leader in leader_of.items():
            self._kv.copy_prefix(seqs[leader].cache, seqs[follower].cache)
        # Every running sequence samples: one that finishes leaves in this same step.
        logits_RV = out.logits[[position[leader_of.get(i, i)] for i in range(len(seqs))]] if leader_of else out.logits
        chosen = choose_tokens(logits_RV, [s.request.sampling for s in seqs], [s.uniforms for s in seqs])
        logprobs_R = raw_logprobs(logits_RV, torch.tensor(chosen, device=logits_RV.device, dtype=torch.int64)).tolist()
        events: list[TokenEvent | GenerationResult] = []
        for i, seq in enumerate(seqs):
            j = position[leader_of.get(i, i)]
            rows = routing_TLK[starts[j] : starts[j] + lens[j]]
            if seq.prompt_routing is None:
                seq.prompt_routing = rows
            else:
                seq.routing_rows.append(rows)
            events.append(self._record(seq, chosen[i], logprobs_R[i]))
            finish = self._finish_reason(seq)
            if finish is not None:
                del self._running[seq.request.request_id]
                events.append(self._retire(seq, finish))
        return events

    @staticmethod
    def _shared_prompts(seqs: list[_Sequence]) -> dict[int, int]:
        """follower index -> leader index, for sequences starting this step with an identical prompt."""
        leader_of: dict[int, int] = {}
        first: dict[tuple[int, ...], int] = {}
        for i, seq in enumerate(seqs):
            if seq.cache.length == 0 and len(seq.pending) > 1:
                leader = first.setdefault(tuple(seq.pending), i)
                if leader != i:
                    leader_of[i] = leader
        return leader_of

    def _record(self, seq: _Sequence, token: int, logprob: float) -> TokenEvent:
        seq.completion.append(token)
        seq.logprobs.append(logprob)
        seq.versions.append(self.policy_version)
        seq.pending = [token]
        return TokenEvent(seq.request.request_id, token, logprob, self.policy_version)

    @staticmethod
    def _finish_reason(seq: _Sequence) -> FinishReason | None:
        """Why the sequence ends with the token it just sampled, or None when it goes on."""
        if seq.completion[-1] in seq.request.sampling.stop_token_ids:
            return "stop"
        if len(seq.completion) >= seq.budget:
            return "length"
        return None

    def _retire(self, seq: _Sequence, reason: FinishReason) -> GenerationResult:
        """Free the sequence's KV slot and return what it produced."""
        self._kv.close(seq.cache)
        layers, k = len(self.model.config.moe_layers), self.model.config.num_experts_per_tok
        empty = torch.zeros(0, layers, k, dtype=torch.int16)
        return GenerationResult(
            request_id=seq.request.request_id,
            prompt_token_ids=seq.request.prompt_token_ids,
            completion_token_ids=seq.completion,
            logprobs=torch.tensor(seq.logprobs, dtype=torch.float32),
            prompt_routing=seq.prompt_routing if seq.prompt_routing is not None else empty,
            completion_routing=torch.cat(seq.routing_rows) if seq.routing_rows else empty,
            policy_versions=seq.versions,
            finish_reason=reason,
            seed=seq.seed,
        )

    def generate(self, requests: Iterable[GenerationRequest]) -> dict[str, GenerationResult]:
        """Submit all, step until none is left; results by request id (a convenience for tests and tools)."""
        for req in requests:
            self.submit(req)
        results: dict[str, GenerationResult] = {}
        while self.has_work:
            for ev in self.step():
                if isinstance(ev, GenerationResult):
                    results[ev.request_id] = ev
        return results
