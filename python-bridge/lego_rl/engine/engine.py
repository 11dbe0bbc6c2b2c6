"""Embedded inference engine: continuous batching, chunked prefill and a prefix cache over one KV pool.

1. The engine knows only token ids (the proxy owns chat templates and tokenizers).
2. Every `step()` is one forward pass over a packed batch: the last sampled token of each
   decoding request, and the next prefill chunk of requests still reading their prompt.
   Prefill runs in chunks at aligned absolute positions [jC, (j+1)C) (C =
   `prefill_chunk`), at most one per request per step and within `max_batch_tokens`, so a
   long new prompt delays each decoding request by one chunk's work per step, never by its
   whole prefill. New requests therefore join between decode steps. A request finishes in
   the step that samples its last token: that token is never fed back, so it has no
   routing row (as in vLLM and SGLang); its hidden state predicts nothing that is trained.
3. Prefix cache (`prefix_cache.py`): every full chunk is stored as soon as it is computed,
   keyed by its tokens, its parent chunk and the policy version; a new request (an agent's
   next turn re-sending its history, a shared system prompt) copies the longest cached
   chain of chunks into its slot and prefills only the rest. Because chunk boundaries are
   absolute, a cached chunk is the chunk the request would have computed itself, routing
   rows included. A chunk another request is computing in this very step is waited for
   (taken from the cache next step), not computed twice. The cache is emptied on every
   weight update, and a request admitted before an update stores nothing after it.
4. Every sequence owns a slot of one shared KV pool; decode steps attend in one call per
   layer over the pool (shorter sequences masked), prefill chunks per sequence. Masked keys
   weigh exactly 0 and the dense/expert math is row-wise, so batch neighbours change a
   request's logits only by rounding (~1e-7; CPU kernels differ by row count). Each request
   samples from its own seeded uniform stream, so a seed reproduces a completion under any
   load. Requests with an identical prompt while one of them is still prefilling it (a GRPO
   group's G copies) prefill it once: the others copy its keys, routing rows and first-token
   logits, then sample from their own streams.
5. With `compile_decode`, a step in which every running request decodes runs as one compiled
   graph (decode_graph.py) that gives the eager forward's tokens, logprobs and routing.
6. Single-threaded: the network layer calls submit/abort/update_weights/step from one
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

from lego_rl.model import CheckpointError, KVCache, KVPool, ModelOutput, MoeForCausalLM, load_model, load_state

from .decode_graph import DecodeGraph
from .prefix_cache import ChunkKey, PrefixCache
from .sampling import UniformStream, choose_tokens, raw_logprobs
from .types import (
    FinishReason,
    GenerationRequest,
    GenerationResult,
    InvalidRequestError,
    SamplingParams,
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
    """Requests holding a KV slot at once (prefilling or decoding); more wait in a FIFO queue."""
    max_batch_tokens: int = 8192
    """Tokens per forward pass: one per decoding request, then prefill chunks in admission order (one always fits)."""
    prefill_chunk: int = 128
    """Prefill runs in chunks of this many tokens at positions [jC, (j+1)C), one chunk per request per
    step; it is also the prefix cache's unit (only whole chunks are cached and reused)."""
    prefix_cache_mib: float = 256.0
    """Memory for the prefix cache (keys, values and routing of full prefill chunks, least recently
    used evicted first); 0 turns it off."""
    max_context: int | None = None
    """Prompt + completion limit; None = the model's max_position_embeddings."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Weights and activations; logprobs are always computed in fp32 from the logits."""
    device: str = "cpu"
    """Torch device of the model, caches and generators."""
    compile_decode: bool = False
    """Run steps where every running request decodes as one compiled graph (decode_graph.py): on CPU a
    32-request decode step of the tiny model costs about half as much. The graph compiles in the first
    such steps (seconds; `Engine.warm_up` does it ahead), so short-lived engines (tests, tools) leave it off."""

    def __post_init__(self) -> None:
        if self.max_running < 1 or self.max_batch_tokens < 1 or self.prefill_chunk < 1:
            raise ValueError(
                f"max_running, max_batch_tokens and prefill_chunk must be >= 1, got {self.max_running}, {self.max_batch_tokens}, {self.prefill_chunk}"
            )
        if not self.prefix_cache_mib >= 0:
            raise ValueError(f"prefix_cache_mib must be >= 0, got {self.prefix_cache_mib}")
        if not isinstance(self.compile_decode, bool):
            raise ValueError(f"compile_decode must be True or False, got {self.compile_decode!r}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")


@dataclass(slots=True, eq=False)
class _Sequence:
    request: GenerationRequest
    cache: KVCache
    uniforms: UniformStream
    seed: int
    budget: int
    """Completion tokens allowed: max_tokens clamped to the context left."""
    order: int
    """Admission order: prefill chunks are scheduled first come, first served."""
    kv_version: int
    """Policy version live at admission; its chunks are cached only while that version is live."""
    decoding: bool = False
    """The prompt is in the cache and the first token sampled."""
    pending: list[int] = field(default_factory=list)
    """While decoding: the last sampled token, fed on the next step."""
    chain: list[int] = field(default_factory=list)
    """Prefix-cache ids of the prompt's first len(chain) chunks."""
    chain_open: bool = True
    """False once a chunk could not be cached: no later chunk of this prompt could be found."""
    leader: _Sequence | None = None
    """The request prefilling this identical prompt for both (None: this one prefills it)."""
    followers: list[_Sequence] = field(default_factory=list)
    cached_tokens: int = 0
    """Prompt tokens whose keys were copied (prefix cache or a leader) rather than computed."""
    prompt_rows: list[torch.Tensor] = field(default_factory=list)
    completion: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    routing_rows: list[torch.Tensor] = field(default_factory=list)

    @property
    def prompt(self) -> tuple[int, ...]:
        return self.request.prompt_token_ids


class Engine:
    """Generates completions for token-id requests; see the module docstring."""

    def __init__(self, model: MoeForCausalLM, config: EngineConfig = EngineConfig(), *, policy_version: int = 0) -> None:
        self.config = config
        self.dtype = _DTYPES[config.dtype]
        self.model = model.to(device=config.device, dtype=self.dtype).eval()
        self.max_context = config.max_context or model.config.max_position_embeddings
        self.policy_version = policy_version
        self.admitting = True
        """False holds queued requests back (the server drains before a weight update); running ones go on."""
        # FIFO by insertion order, keyed by request id: submit's duplicate check and abort
        # stay O(1) however many requests a rollout worker queues.
        self._waiting: dict[str, GenerationRequest] = {}
        self._running: dict[str, _Sequence] = {}
        self._leaders: dict[tuple[int, ...], _Sequence] = {}
        """Requests prefilling a prompt, by prompt: a request with the same prompt waits for it."""
        self._admitted = 0
        self._seed_source = random.Random()
        # Made under inference mode like its growth in step(): one kind of tensor throughout (a compiled decode
        # step would otherwise recompile when the pool first grows), written only under inference mode.
        with torch.inference_mode():
            self._kv = KVPool(
                model.config, slots=_INITIAL_POOL_SLOTS, capacity=_INITIAL_POOL_POSITIONS, dtype=self.dtype, device=config.device
            )
        chunk_bytes = PrefixCache.bytes_per_chunk(model.config, config.prefill_chunk, self.dtype)
        max_chunks = int(config.prefix_cache_mib * 2**20) // chunk_bytes
        self._prefix = (
            PrefixCache(model.config, chunk=config.prefill_chunk, max_chunks=max_chunks, dtype=self.dtype, device=config.device)
            if max_chunks > 0 else None
        )
        self._decode_graph = DecodeGraph(self.model) if config.compile_decode else None
        self.stats = {"prompt_tokens": 0, "cached_prompt_tokens": 0, "computed_prompt_tokens": 0}
        """Counters since start: prompt tokens admitted, copied instead of computed, and computed."""

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

    @torch.inference_mode()  # freeing a slot writes into the KV pool, an inference tensor
    def abort(self, request_id: str) -> GenerationResult:
        """Stop a request now and return what it produced so far (finish_reason 'abort')."""
        seq = self._running.pop(request_id, None)
        if seq is not None:
            self._detach(seq)
            return self._retire(seq, "abort")
        req = self._waiting.pop(request_id, None)
        if req is not None:
            return self._retire(self._start(req), "abort")
        raise UnknownRequestError(request_id)

    @property
    def has_work(self) -> bool:
        return bool(self._running or (self._waiting and self.admitting))

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def queued_request_ids(self) -> list[str]:
        """Requests waiting for admission, in FIFO order."""
        return list(self._waiting)

    @property
    def prefix_cache(self) -> PrefixCache | None:
        """The cache of full prefill chunks (None when `prefix_cache_mib` is 0)."""
        return self._prefix

    def warm_up(self) -> None:
        """Compile the decode graph now (with compile_decode; otherwise nothing), not in the steps of the first
        real requests: a server calls it before it listens. Eight throwaway requests fill the pool's first
        eight slots (every slot decoding) and finish at different steps (fewer), the graph's two variants."""
        if self._decode_graph is None:
            return
        if self._running or self._waiting:
            raise RuntimeError("warm_up runs before any request: it would share steps with real ones")
        stats = dict(self.stats)
        self.generate(
            GenerationRequest(request_id=f"lego-warm-up-{i}", prompt_token_ids=(0, 0), sampling=SamplingParams(temperature=0, max_tokens=3 + i % 2))
            for i in range(_INITIAL_POOL_SLOTS)
        )
        self.stats = stats

    # ---- weights --------------------------------------------------------------------

    def update_weights(self, tensors: Mapping[str, torch.Tensor], version: int, *, source: str | Path | None = None) -> None:
        """Load a full HF-named state dict (either expert layout) and move to `version`.

        Every tensor is checked (names, shapes, floating point) before any is copied, so a
        refused update leaves the weights as they were. `source` names them in errors. The
        prefix cache is emptied: its keys were computed by the old weights.
        """
        if version <= self.policy_version:
            raise WeightUpdateError(f"policy version must increase: have {self.policy_version}, got {version}")
        try:
            load_state(self.model, dict(tensors), source=Path(source if source is not None else f"<weights v{version}>"))
        except CheckpointError as err:
            raise WeightUpdateError(str(err)) from err
        self.policy_version = version
        if self._prefix is not None:
            self._prefix.clear()

    # ---- admission ------------------------------------------------------------------

    def _start(self, req: GenerationRequest) -> _Sequence:
        seed = req.sampling.seed if req.sampling.seed is not None else self._seed_source.randrange(2**63)
        budget = min(req.sampling.max_tokens, self.max_context - len(req.prompt_token_ids))
        self._admitted += 1
        return _Sequence(
            request=req, cache=self._kv.open(), uniforms=UniformStream(seed, self.config.device), seed=seed, budget=budget,
            order=self._admitted, kv_version=self.policy_version,
        )

    def _admit(self) -> None:
        while self.admitting and self._waiting and len(self._running) < self.config.max_running:
            seq = self._start(self._waiting.pop(next(iter(self._waiting))))
            self._running[seq.request.request_id] = seq
            self.stats["prompt_tokens"] += len(seq.prompt)
            leader = self._leaders.get(seq.prompt)
            if leader is not None:
                seq.leader = leader
                leader.followers.append(seq)
            else:
                self._leaders[seq.prompt] = seq
                self._reuse_cached(seq)

    def _reuse_cached(self, seq: _Sequence) -> None:
        """Copy the cached chunks that continue the sequence's prompt from where its cache ends."""
        start = seq.cache.length
        if self._prefix is None or not seq.chain_open or seq.kv_version != self.policy_version or start != len(seq.chain) * self._prefix.chunk:
            return
        parent = seq.chain[-1] if seq.chain else -1
        # At least the prompt's last token is computed: its logits give the first sampled token.
        found = self._prefix.lookup(parent, self.policy_version, seq.prompt, start, len(seq.prompt) - 1)
        if found:
            seq.prompt_rows.append(self._prefix.load(found, seq.cache, start))
            seq.chain += found
            copied = seq.cache.length - start
            seq.cached_tokens += copied
            self.stats["cached_prompt_tokens"] += copied

    def _detach(self, seq: _Sequence) -> None:
        """Take an aborted sequence out of the prompt sharing: a follower leaves its leader; a leader's first follower takes over."""
        if seq.leader is not None:
            seq.leader.followers.remove(seq)
            return
        if self._leaders.get(seq.prompt) is seq:
            del self._leaders[seq.prompt]
            if seq.followers:
                heir, *rest = seq.followers
                heir.leader, heir.followers = None, rest
                for f in rest:
                    f.leader = heir
                self._leaders[heir.prompt] = heir
                self._reuse_cached(heir)

    # ---- one step -------------------------------------------------------------------

    def _plan(self, seqs: list[_Sequence]) -> dict[_Sequence, tuple[int, int]]:
        """The prefill chunk [start, end) each prefilling sequence computes this step."""
        C = self.config.prefill_chunk
        decoding = sum(s.decoding for s in seqs)
        budget = self.config.max_batch_tokens - decoding
        chunks: dict[_Sequence, tuple[int, int]] = {}
        computing: set[ChunkKey] = set()
        for seq in sorted((s for s in seqs if not s.decoding and s.leader is None), key=lambda s: s.order):
            self._reuse_cached(seq)  # chunks other requests stored since the last step
            start = seq.cache.length
            end = min(start - start % C + C, len(seq.prompt))
            if (chunks or decoding) and end - start > budget:
                break
            if self._cacheable(seq, start, end):
                assert self._prefix is not None
                key = self._prefix.key(seq.chain[-1] if seq.chain else -1, self.policy_version, seq.prompt[start:end])
                if key in computing:
                    continue  # another request computes this very chunk now: take it from the cache next step
                computing.add(key)
            chunks[seq] = (start, end)
            budget -= end - start
        return chunks

    def _cacheable(self, seq: _Sequence, start: int, end: int) -> bool:
        C = self.config.prefill_chunk
        return (self._prefix is not None and seq.chain_open and end - start == C and start == len(seq.chain) * C
                and seq.kv_version == self.policy_version)

    @torch.inference_mode()
    def step(self) -> list[TokenEvent | GenerationResult]:
        """Admit what fits, run one forward pass, sample; returns this step's events."""
        self._admit()
        # In slot order, so the decode rows' keys are one view of the pool (attention.py).
        seqs = sorted(self._running.values(), key=lambda s: s.cache.slot)
        chunks = self._plan(seqs)
        fed = [(s, s.pending if s.decoding else list(s.prompt[chunks[s][0] : chunks[s][1]])) for s in seqs if s.decoding or s in chunks]
        if not fed:
            return []
        lens = [len(tokens) for _, tokens in fed]
        ends = (torch.tensor(lens).cumsum(0) - 1).tolist()
        # Logits only where a token is sampled: decode rows and prompts' last chunks.
        sampled = [i for i, (s, _) in enumerate(fed) if s.decoding or chunks[s][1] == len(s.prompt)]
        caches = [s.cache for s, _ in fed]
        graphed = None
        if self._decode_graph is not None and not chunks and self._decode_graph.fits(caches):
            graphed = self._decode_graph.run([tokens[0] for _, tokens in fed], caches)
        if graphed is not None:
            out = ModelOutput(logits=graphed[0], routing=graphed[1])
        else:
            out = self.model(
                torch.tensor([t for _, tokens in fed for t in tokens], device=self.config.device),
                seq_lens=lens,
                caches=caches,
                return_routing=True,
                logits_rows=torch.tensor([ends[i] for i in sampled], dtype=torch.int64, device=self.config.device),
            )
        routing_TLK = out.routing.cpu()
        logits_row = {fed[i][0]: j for j, i in enumerate(sampled)}
        for (seq, _), end, n in zip(fed, ends, lens):
            rows = routing_TLK[end - n + 1 : end + 1]
            if seq.decoding:
                seq.routing_rows.append(rows)
                continue
            start, stop = chunks[seq]
            seq.prompt_rows.append(rows)
            self.stats["computed_prompt_tokens"] += n
            self._store(seq, start, stop, rows)
            if stop == len(seq.prompt):
                self._finish_prefill(seq, logits_row)
        # Every sampling sequence samples: one that finishes leaves in this same step.
        samplers = sorted(logits_row, key=lambda s: s.cache.slot)
        if not samplers:
            return []  # only prompt chunks that end before their prompt's last token
        logits_RV = out.logits[[logits_row[s] for s in samplers]]
        chosen = choose_tokens(logits_RV, [s.request.sampling for s in samplers], [s.uniforms for s in samplers])
        logprobs_R = raw_logprobs(logits_RV, torch.tensor(chosen, device=logits_RV.device, dtype=torch.int64)).tolist()
        events: list[TokenEvent | GenerationResult] = []
        for seq, token, logprob in zip(samplers, chosen, logprobs_R):
            events.append(self._record(seq, token, logprob))
            finish = self._finish_reason(seq)
            if finish is not None:
                del self._running[seq.request.request_id]
                events.append(self._retire(seq, finish))
        return events

    def _store(self, seq: _Sequence, start: int, end: int, rows: torch.Tensor) -> None:
        """Put a just-computed full chunk in the prefix cache (when it is the next link of the sequence's chain)."""
        if not self._cacheable(seq, start, end):
            if end - start == self.config.prefill_chunk:
                seq.chain_open = False
            return
        assert self._prefix is not None
        cid = self._prefix.insert(seq.chain[-1] if seq.chain else -1, self.policy_version, seq.prompt[start:end], seq.cache, start, rows)
        if cid is None:
            seq.chain_open = False
        else:
            seq.chain.append(cid)

    def _finish_prefill(self, seq: _Sequence, logits_row: dict[_Sequence, int]) -> None:
        """The prompt is cached: the sequence samples now, and so does every request waiting on this prompt."""
        seq.decoding = True
        if self._leaders.get(seq.prompt) is seq:
            del self._leaders[seq.prompt]
        rows = torch.cat(seq.prompt_rows)
        seq.prompt_rows = [rows]
        for follower in seq.followers:
            self._kv.copy_prefix(seq.cache, follower.cache)
            follower.prompt_rows = [rows]
            follower.leader, follower.decoding = None, True
            follower.cached_tokens = len(follower.prompt)
            self.stats["cached_prompt_tokens"] += len(follower.prompt)
            logits_row[follower] = logits_row[seq]
        seq.followers = []

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
            prompt_token_ids=seq.prompt,
            completion_token_ids=seq.completion,
            logprobs=torch.tensor(seq.logprobs, dtype=torch.float32),
            prompt_routing=torch.cat(seq.prompt_rows) if seq.prompt_rows else empty,
            completion_routing=torch.cat(seq.routing_rows) if seq.routing_rows else empty,
            policy_versions=seq.versions,
            finish_reason=reason,
            seed=seq.seed,
            cached_tokens=seq.cached_tokens,
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
