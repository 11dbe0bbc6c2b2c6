"""RMSNorm, rotary embedding, grouped-query attention over packed sequences and KV caches.

Shape legend: T packed tokens (all sequences of a batch, end to end), D model width,
H query heads, G key/value heads, Dh head width, S cached positions of one sequence,
L decoder layers.

Design:
1. Activations are packed [T, D]; `PackedBatch` says where each sequence starts, so a
   batch of prefills and single-token decodes is one forward pass.
2. Decode steps (one new token per sequence) of sequences sharing a `KVPool` run as one
   attention call per layer over the pool's slots, shorter ones masked: masked positions
   weigh exactly 0, so batch neighbours change a sequence's output only by rounding.
   Equal-length sequences with nothing cached (same-length prompts, a GRPO group's
   copies) attend in one causal call; any other chunk attends alone over its cache.
   The grouping is planned once per forward (`PackedBatch`) and reused by every layer.
3. Numerics follow HF Qwen3-MoE: RMSNorm in fp32 and weight applied after the cast back,
   q/k RMSNorm per head before RoPE, rotate-half RoPE with cos/sin built in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .config import Config
from .derived import DerivedWeights


def rms_normalized(x_xD: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last axis, computed in fp32 and cast back (before any weight)."""
    x32 = x_xD.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x_xD.dtype)


class RMSNorm(nn.Module):
    """y = w * (x / sqrt(mean(x^2) + eps)), normalised in fp32 like HF Qwen3MoeRMSNorm."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x_xD: torch.Tensor) -> torch.Tensor:
        return self.weight * rms_normalized(x_xD, self.eps)


def rope_cos_sin(
    positions_T: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [T, Dh] for rotate-half RoPE (Su et al. 2021; HF 'default' rope_type)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions_T.device) / head_dim))
    freqs_TDh2 = positions_T.float()[:, None] * inv_freq[None, :]
    emb_TDh = torch.cat((freqs_TDh2, freqs_TDh2), dim=-1)
    return emb_TDh.cos().to(dtype), emb_TDh.sin().to(dtype)


def _apply_rope(x_THDh: torch.Tensor, cos_TDh: torch.Tensor, sin_TDh: torch.Tensor) -> torch.Tensor:
    half = x_THDh.shape[-1] // 2
    rotated = torch.cat((-x_THDh[..., half:], x_THDh[..., :half]), dim=-1)
    return x_THDh * cos_TDh[:, None, :] + rotated * sin_TDh[:, None, :]


class KVPool:
    """Keys and values of several sequences in one tensor pair [L, N, G, S, Dh] (N slots).

    Sequences sharing a pool decode in one attention call per layer: their slots are kept
    dense (0..n-1, see `close`), so the batch's keys are a view of the pool, not a copy.
    Both axes grow by doubling, so appends stay amortised O(1); the price is that every
    slot has the longest sequence's capacity (fine for the CPU engine's small models).
    """

    def __init__(
        self, config: Config, *, capacity: int, slots: int = 1, dtype: torch.dtype, device: torch.device | str = "cpu"
    ) -> None:
        shape = (config.num_hidden_layers, max(slots, 1), config.num_key_value_heads, max(capacity, 1), config.head_dim)
        self.k_LNGSDh = torch.zeros(shape, dtype=dtype, device=device)
        self.v_LNGSDh = torch.zeros(shape, dtype=dtype, device=device)
        self._open: list[KVCache] = []
        """Open caches; cache.slot == its index here."""

    @property
    def capacity(self) -> int:
        return self.k_LNGSDh.shape[3]

    @property
    def slots(self) -> int:
        return self.k_LNGSDh.shape[1]

    def open(self) -> KVCache:
        """A new empty sequence in the lowest free slot (the pool grows if all are taken)."""
        self._grow(slots=len(self._open) + 1)
        cache = KVCache(self, len(self._open))
        self._open.append(cache)
        return cache

    def close(self, cache: KVCache) -> None:
        """Free a sequence's slot; the last open sequence moves into it so slots stay dense."""
        if cache.pool is not self or self._open[cache.slot] is not cache:
            raise ValueError("this KVCache is not open in this pool")
        last = self._open.pop()
        if last is not cache:
            n = last.length
            self.k_LNGSDh[:, cache.slot, :, :n] = self.k_LNGSDh[:, last.slot, :, :n]
            self.v_LNGSDh[:, cache.slot, :, :n] = self.v_LNGSDh[:, last.slot, :, :n]
            last.slot = cache.slot
            self._open[cache.slot] = last
        cache.pool = None

    def copy_prefix(self, source: KVCache, target: KVCache) -> None:
        """Give an empty `target` the keys and values `source` holds (the same prompt, computed once)."""
        if source.pool is not self or target.pool is not self:
            raise ValueError("both caches must be open in this pool")
        if target.length != 0:
            raise ValueError(f"the target cache already holds {target.length} positions")
        n = source.length
        self.k_LNGSDh[:, target.slot, :, :n] = self.k_LNGSDh[:, source.slot, :, :n]
        self.v_LNGSDh[:, target.slot, :, :n] = self.v_LNGSDh[:, source.slot, :, :n]
        target.length = n

    def reserve(self, positions: int) -> None:
        """Make room for `positions` in every slot."""
        self._grow(positions=positions)

    def _grow(self, *, slots: int = 0, positions: int = 0) -> None:
        if slots <= self.slots and positions <= self.capacity:
            return
        new_slots = self.slots if slots <= self.slots else max(slots, 2 * self.slots)
        new_cap = self.capacity if positions <= self.capacity else max(positions, 2 * self.capacity)
        L, N, G, S, Dh = self.k_LNGSDh.shape
        for name in ("k_LNGSDh", "v_LNGSDh"):
            old = getattr(self, name)
            grown = torch.zeros((L, new_slots, G, new_cap, Dh), dtype=old.dtype, device=old.device)
            grown[:, :N, :, :S] = old
            setattr(self, name, grown)


class KVCache:
    """One sequence's keys and values: a slot of a `KVPool` and how many positions are filled."""

    def __init__(self, pool: KVPool, slot: int) -> None:
        self.pool: KVPool | None = pool
        self.slot = slot
        self.length = 0
        """Positions filled; a forward writes its new tokens at [length, length + t)."""

    @classmethod
    def alone(cls, config: Config, capacity: int, *, dtype: torch.dtype, device: torch.device | str = "cpu") -> KVCache:
        """A cache with a pool of its own (single-sequence use: tests, scripts)."""
        return KVPool(config, capacity=capacity, dtype=dtype, device=device).open()

    @property
    def capacity(self) -> int:
        return self._pool().capacity

    def reserve(self, positions: int) -> None:
        self._pool().reserve(positions)

    def _pool(self) -> KVPool:
        if self.pool is None:
            raise ValueError("this KVCache was closed; open a new one from its pool")
        return self.pool

    def keys(self, layer: int) -> torch.Tensor:
        """[G, S, Dh] view of this sequence's keys at `layer` (all capacity)."""
        return self._pool().k_LNGSDh[layer, self.slot]

    def values(self, layer: int) -> torch.Tensor:
        return self._pool().v_LNGSDh[layer, self.slot]


@dataclass(slots=True, frozen=True)
class DecodeRows:
    """The single-token rows of cached sequences that share one pool: they attend together.

    Built once per forward pass; every layer reuses the index tensors and the mask.
    """

    seqs: frozenset[int]
    """Indices (in packing order) of the sequences in this group."""
    caches: list[KVCache]
    rows_B: torch.Tensor
    """Packed row of each sequence's new token."""
    slot_B: torch.Tensor
    pos_B: torch.Tensor
    """Where each new key/value goes: slot and position in the pool."""
    slots: list[int]
    positions: list[int]
    span: int
    """Key positions attended: the longest sequence's, its new token included."""
    first_dense_slot: int | None
    """First slot when the slots are first..first+B-1 in order (keys are then a view), else None."""
    mask_B11S: torch.Tensor | None
    """True where a key is attended; None when every sequence spans all `span` positions."""

    @staticmethod
    def plan(seq_lens: list[int], offsets: list[int], caches: list[KVCache], device: torch.device) -> DecodeRows | None:
        """Group the single-token rows of the most common pool; None when there is nothing to batch."""
        seqs = [i for i, t in enumerate(seq_lens) if t == 1]
        if not seqs:
            return None
        pool = caches[seqs[0]].pool
        seqs = [i for i in seqs if caches[i].pool is pool]
        group = [caches[i] for i in seqs]
        slots, positions = [c.slot for c in group], [c.length for c in group]
        span = max(positions) + 1
        first = slots[0]
        pos_B = torch.tensor(positions, device=device)
        mask = None
        if min(positions) + 1 < span:
            mask = (torch.arange(span, device=device)[None, :] <= pos_B[:, None])[:, None, None, :]
        return DecodeRows(
            seqs=frozenset(seqs),
            caches=group,
            rows_B=torch.tensor([offsets[i] for i in seqs], device=device),
            slot_B=torch.tensor(slots, device=device),
            pos_B=pos_B,
            slots=slots,
            positions=positions,
            span=span,
            first_dense_slot=first if slots == list(range(first, first + len(slots))) else None,
            mask_B11S=mask,
        )


SMALL_ATTENTION_MAX_KEYS = 128
"""Up to this many keys, fp32 attention on CPU is written out (`small_attention`) rather than SDPA."""


def use_small_attention(q: torch.Tensor, keys: int) -> bool:
    """True where `small_attention` beats torch's SDPA: fp32 on CPU with few keys."""
    return q.device.type == "cpu" and q.dtype == torch.float32 and keys <= SMALL_ATTENTION_MAX_KEYS


def small_attention(
    q_xQDh: torch.Tensor, k_xSDh: torch.Tensor, v_xSDh: torch.Tensor, *, keep_xQS: torch.Tensor | None = None, causal: bool = False
) -> torch.Tensor:
    """softmax(q k^T / sqrt(Dh)) v over the last two axes, keys hidden where `keep` is False
    (and, when `causal`, keys after each query, the last query seeing every key), written
    out as two matmuls and a softmax.

    torch's CPU SDPA kernel (flash attention for CPU) has a large fixed cost: ~250 us for a
    decode step of 32 sequences x 4 heads over ~30 keys, and ~3.2 ms forward + backward
    for the trainer's 32 x 4 heads x 27 tokens, on the 2-core VM; this costs ~100 us and
    ~2.0 ms and gives the same values up to summation order (< 1e-6). Hidden keys get
    -inf, so they weigh exactly 0 as in SDPA. Scores are materialized ([.., Q, S]), which
    is why `use_small_attention` limits it to few keys; in bf16 SDPA keeps its fp32
    accumulation, and on GPUs its kernels win.
    """
    scores = torch.matmul(q_xQDh, k_xSDh.transpose(-1, -2)) * (q_xQDh.shape[-1] ** -0.5)
    if keep_xQS is not None:
        scores = scores.masked_fill(~keep_xQS, float("-inf"))
    if causal:
        Q, S = scores.shape[-2], scores.shape[-1]
        above = torch.ones(Q, S, dtype=torch.bool, device=scores.device).triu(S - Q + 1)
        scores = scores.masked_fill(above, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v_xSDh)


@dataclass(slots=True, frozen=True)
class FreshGroup:
    """Sequences of equal length t > 1 with nothing cached before them: one causal attention call."""

    seqs: frozenset[int]
    length: int
    rows_N: torch.Tensor
    """Packed rows of the group's tokens, sequence after sequence ([B * t])."""
    caches: list[KVCache] | None
    """Their caches to fill (None on the trainer path)."""

    @staticmethod
    def plan(
        seq_lens: list[int], offsets: list[int], caches: list[KVCache] | None, skip: frozenset[int], device: torch.device
    ) -> list[FreshGroup]:
        by_length: dict[int, list[int]] = {}
        for i, t in enumerate(seq_lens):
            if t > 1 and i not in skip and (caches is None or caches[i].length == 0):
                by_length.setdefault(t, []).append(i)
        groups = []
        for t, seqs in by_length.items():
            if len(seqs) < 2:
                continue
            starts_B = torch.tensor([offsets[i] for i in seqs], device=device)
            rows_N = (starts_B[:, None] + torch.arange(t, device=device)[None, :]).reshape(-1)
            groups.append(FreshGroup(seqs=frozenset(seqs), length=t, rows_N=rows_N,
                                     caches=None if caches is None else [caches[i] for i in seqs]))
        return groups


@dataclass(slots=True, frozen=True)
class TailRows:
    """Sequences that continue another packed sequence (a shared prefix, computed once).

    The trainer packs a GRPO group's common prompt once and each completion after it as
    a "tail" (`PackedBatch.prefix_of`): a tail's queries see every token of its prefix and
    its own earlier tokens, exactly as if the prefix were repeated before it. Tails come
    after every other sequence, so their rows are the packed axis's last ones; they attend
    in one call, padded to the longest tail and the longest prefix, the padding masked.
    """

    first_row: int
    """Packed row of the first tail token; rows before it belong to the other sequences."""
    q_nL: torch.Tensor
    """Packed row of each tail's query positions, [n tails, longest tail] (padding repeats a valid row)."""
    kv_nS: torch.Tensor
    """Packed rows of each tail's keys: its prefix (padded to the longest), then itself."""
    keep_n1LS: torch.Tensor
    """True where a query sees a key: the whole prefix, and itself causally; padding hidden."""
    valid_V: torch.Tensor
    """Rows of the flattened [n x longest tail] output that are real tokens, in packing order."""

    @staticmethod
    def plan(seq_lens: list[int], offsets: list[int], prefix_of: list[int], device: torch.device) -> TailRows:
        tails = [i for i, p in enumerate(prefix_of) if p >= 0]
        heads = [prefix_of[i] for i in tails]
        t_n = torch.tensor([seq_lens[i] for i in tails], device=device)
        p_n = torch.tensor([seq_lens[h] for h in heads], device=device)
        L, P = int(t_n.max()), int(p_n.max())
        j_L, j_P = torch.arange(L, device=device), torch.arange(P, device=device)
        # Padding positions repeat a sequence's last row (any valid row would do: they are masked or dropped).
        q_nL = torch.tensor([offsets[i] for i in tails], device=device)[:, None] + torch.minimum(j_L, t_n[:, None] - 1)
        head_nP = torch.tensor([offsets[h] for h in heads], device=device)[:, None] + torch.minimum(j_P, p_n[:, None] - 1)
        real_nL = j_L < t_n[:, None]
        sees_head_nLP = (j_P < p_n[:, None])[:, None, :].expand(len(tails), L, P)
        sees_own_nLL = (j_L[None, :] <= j_L[:, None])[None] & real_nL[:, None, :]
        return TailRows(
            first_row=offsets[tails[0]],
            q_nL=q_nL,
            kv_nS=torch.cat((head_nP, q_nL), dim=1),
            keep_n1LS=torch.cat((sees_head_nLP, sees_own_nLL), dim=2)[:, None],
            valid_V=real_nL.reshape(-1).nonzero().squeeze(1),
        )


@dataclass(slots=True)
class PackedBatch:
    """Where each sequence's new tokens sit in the packed [T] axis, and its cache if any."""

    seq_lens: list[int]
    """New tokens of each sequence, in packing order; they sum to T."""
    caches: list[KVCache] | None = None
    """One cache per sequence (engine), or None: each sequence attends only to itself (trainer)."""
    device: torch.device | str = "cpu"
    offsets: list[int] = field(init=False)
    """Packed row where each sequence starts."""
    decode: DecodeRows | None = field(init=False)
    """Single-token cached rows that attend in one call per layer."""
    fresh: list[FreshGroup] = field(init=False)
    """Equal-length sequences without a cached prefix (prefills of same-length prompts) that attend together."""
    prefix_of: list[int] | None = None
    """Trainer only: for each sequence, the earlier sequence it continues (-1: none); see `TailRows`."""
    tails: TailRows | None = field(init=False)
    """The continuing sequences, when `prefix_of` names any."""
    leading: PackedBatch | None = field(init=False)
    """The sequences before the tails, as a batch of their own (None without tails)."""

    def __post_init__(self) -> None:
        self.offsets, acc = [], 0
        for n in self.seq_lens:
            self.offsets.append(acc)
            acc += n
        device = torch.device(self.device)
        self.tails, self.leading = None, None
        if self.prefix_of is not None and any(p >= 0 for p in self.prefix_of):
            first = _check_prefix_of(self.prefix_of, self.seq_lens, self.caches)
            self.tails = TailRows.plan(self.seq_lens, self.offsets, self.prefix_of, device)
            self.leading = PackedBatch(seq_lens=self.seq_lens[:first], device=device)
        self.decode = None
        if self.caches is not None:
            self.decode = DecodeRows.plan(self.seq_lens, self.offsets, self.caches, device)
        self.fresh = FreshGroup.plan(
            self.seq_lens, self.offsets, self.caches, self.decode.seqs if self.decode else frozenset(), device
        )


def _check_prefix_of(prefix_of: list[int], seq_lens: list[int], caches: list[KVCache] | None) -> int:
    """Validates a tail layout; returns the index of the first tail."""
    if caches is not None:
        raise ValueError("prefix_of is for the trainer's packed input; cached sequences already continue their cache")
    if len(prefix_of) != len(seq_lens):
        raise ValueError(f"prefix_of names {len(prefix_of)} sequences, the input has {len(seq_lens)}")
    first = next(i for i, p in enumerate(prefix_of) if p >= 0)
    for i, p in enumerate(prefix_of):
        if i >= first and not 0 <= p < first:
            raise ValueError(
                f"sequence {i} continues {p}: continuing sequences must come after every other one "
                "and continue one of those"
            )
        if seq_lens[i] == 0:
            raise ValueError(f"sequence {i} is empty")
    return first


def _causal_mask(t: int, past: int, device: torch.device) -> torch.Tensor:
    """[t, past + t] bool: query i sees keys 0..past+i (causal with a cached prefix)."""
    q_pos = torch.arange(t, device=device)[:, None] + past
    return torch.arange(past + t, device=device)[None, :] <= q_pos


class Attention(nn.Module):
    """Grouped-query attention with per-head q/k RMSNorm (Qwen3) and RoPE."""

    def __init__(self, config: Config, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_heads, self.n_kv, self.head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self._derived = DerivedWeights()

    def project(
        self,
        x_TD: torch.Tensor,
        cos_TDh: torch.Tensor,
        sin_TDh: torch.Tensor,
        fused: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [T, H, Dh] and k [T, G, Dh] normed per head and rotated, v [T, G, Dh].

        One GEMM for q, k and v, and one norm + one rotation over the H + G query and key
        heads together: the same elementwise math as three projections, two norms and two
        rotations (HF's order), in a third of the ops, which dominate at decode sizes.
        `fused` is `fused_weights()` fetched by the caller (the engine's compiled decode step,
        which cannot look up the kept copies inside its graph); None fetches them here.
        """
        T, H, G, Dh = x_TD.shape[0], self.n_heads, self.n_kv, self.head_dim
        w, b, norm_weight_NDh = self.fused_weights() if fused is None else fused
        qkv_TND = F.linear(x_TD, w, b).view(T, H + 2 * G, Dh)
        qk_TNDh = _apply_rope(norm_weight_NDh * rms_normalized(qkv_TND[:, : H + G], self.q_norm.eps), cos_TDh, sin_TDh)
        return qk_TNDh[:, :H], qk_TNDh[:, H:], qkv_TND[:, H + G :]

    def fused_weights(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(q/k/v weight [(H + 2G) * Dh, D], its bias or None, q/k norm weight per head [H + G, Dh]),
        kept between steps under inference mode (derived.py)."""
        H, G, Dh = self.n_heads, self.n_kv, self.head_dim
        q, k, v = self.q_proj, self.k_proj, self.v_proj
        w = self._derived.get("qkv", (q.weight, k.weight, v.weight), lambda: torch.cat((q.weight, k.weight, v.weight)))
        b = None
        if q.bias is not None:
            b = self._derived.get("qkv_bias", (q.bias, k.bias, v.bias), lambda: torch.cat((q.bias, k.bias, v.bias)))
        # q_norm and k_norm share eps (config.rms_norm_eps); each keeps its own weight.
        qn, kn = self.q_norm.weight, self.k_norm.weight
        return w, b, self._derived.get("qk_norm", (qn, kn), lambda: torch.cat((qn.expand(H, Dh), kn.expand(G, Dh))))

    def _expand_kv(self, kv_xGSDh: torch.Tensor) -> torch.Tensor:
        """Repeat each KV head for its H/G query heads (torch 2.15's CPU SDPA is ~100x slower with enable_gqa)."""
        groups = self.n_heads // self.n_kv
        return kv_xGSDh if groups == 1 else kv_xGSDh.repeat_interleave(groups, dim=-3)

    def _decode_batch(self, q_BHDh: torch.Tensor, k_BGDh: torch.Tensor, v_BGDh: torch.Tensor, rows: DecodeRows) -> torch.Tensor:
        """One new token for each of B sequences of one pool, in one attention call ([B, H, Dh]).

        Each token's key/value is written at its sequence's position; then every query
        attends over its slot's first `span` positions, the shorter slots masked. Masked
        positions weigh exactly 0, so a sequence's output differs from attending alone only
        by summation order (~1e-7, like the GEMMs).
        """
        pool = rows.caches[0]._pool()
        B = len(rows.slots)
        k_NGSDh, v_NGSDh = pool.k_LNGSDh[self.layer], pool.v_LNGSDh[self.layer]
        if B <= 4:  # a few slice writes cost less than building an index_put
            for i, (slot, pos) in enumerate(zip(rows.slots, rows.positions)):
                k_NGSDh[slot, :, pos] = k_BGDh[i]
                v_NGSDh[slot, :, pos] = v_BGDh[i]
        else:
            k_NGSDh[rows.slot_B, :, rows.pos_B] = k_BGDh
            v_NGSDh[rows.slot_B, :, rows.pos_B] = v_BGDh
        first, span = rows.first_dense_slot, rows.span
        if first is not None:
            # The engine's usual case: dense slots in order, so the keys are a view of the pool.
            keys_BGSDh, values_BGSDh = k_NGSDh[first : first + B, :, :span], v_NGSDh[first : first + B, :, :span]
        else:
            keys_BGSDh = k_NGSDh[:, :, :span].index_select(0, rows.slot_B)
            values_BGSDh = v_NGSDh[:, :, :span].index_select(0, rows.slot_B)
        # Fold each KV group's query heads into the query axis: [B, G, H/G, Dh] vs [B, G, S, Dh].
        q_BGrDh = q_BHDh.view(B, self.n_kv, self.n_heads // self.n_kv, self.head_dim)
        if use_small_attention(q_BGrDh, span):
            o_BGrDh = small_attention(q_BGrDh, keys_BGSDh, values_BGSDh, keep_xQS=rows.mask_B11S)
        else:
            o_BGrDh = F.scaled_dot_product_attention(q_BGrDh, keys_BGSDh, values_BGSDh, attn_mask=rows.mask_B11S)
        return o_BGrDh.reshape(B, self.n_heads, self.head_dim)

    def _fresh_batch(self, q_NHDh: torch.Tensor, k_NGDh: torch.Tensor, v_NGDh: torch.Tensor, group: FreshGroup) -> torch.Tensor:
        """Causal attention of B equal-length sequences with no cached prefix, filling their caches ([N, H, Dh])."""
        t = group.length
        B = q_NHDh.shape[0] // t
        k_BGtDh = k_NGDh.view(B, t, self.n_kv, self.head_dim).transpose(1, 2)
        v_BGtDh = v_NGDh.view(B, t, self.n_kv, self.head_dim).transpose(1, 2)
        for b, cache in enumerate(group.caches or ()):
            cache.keys(self.layer)[:, :t] = k_BGtDh[b]
            cache.values(self.layer)[:, :t] = v_BGtDh[b]
        q_BHtDh = q_NHDh.view(B, t, self.n_heads, self.head_dim).transpose(1, 2)
        if use_small_attention(q_BHtDh, t):
            o_BHtDh = small_attention(q_BHtDh, self._expand_kv(k_BGtDh), self._expand_kv(v_BGtDh), causal=True)
        else:
            o_BHtDh = F.scaled_dot_product_attention(q_BHtDh, self._expand_kv(k_BGtDh), self._expand_kv(v_BGtDh), is_causal=True)
        return o_BHtDh.transpose(1, 2).reshape(B * t, self.n_heads, self.head_dim)

    def forward(
        self, x_TD: torch.Tensor, cos_TDh: torch.Tensor, sin_TDh: torch.Tensor, batch: PackedBatch
    ) -> torch.Tensor:
        T = x_TD.shape[0]
        q_THDh, k_TGDh, v_TGDh = self.project(x_TD, cos_TDh, sin_TDh)
        if batch.tails is not None and batch.leading is not None:
            h = batch.tails.first_row
            leading_hHDh = self._attend(q_THDh[:h], k_TGDh[:h], v_TGDh[:h], batch.leading)
            tails_tHDh = self._attend_tails(q_THDh, k_TGDh, v_TGDh, batch.tails)
            return self.o_proj(torch.cat((leading_hHDh, tails_tHDh)).reshape(T, -1))
        return self.o_proj(self._attend(q_THDh, k_TGDh, v_TGDh, batch).reshape(T, -1))

    def _attend_tails(self, q_THDh: torch.Tensor, k_TGDh: torch.Tensor, v_TGDh: torch.Tensor, tails: TailRows) -> torch.Tensor:
        """Attention output [tail rows, H, Dh] of the continuing sequences (see `TailRows`)."""
        q_nHLDh = q_THDh[tails.q_nL].transpose(1, 2)
        k_nHSDh = self._expand_kv(k_TGDh[tails.kv_nS].transpose(1, 2))
        v_nHSDh = self._expand_kv(v_TGDh[tails.kv_nS].transpose(1, 2))
        if use_small_attention(q_nHLDh, k_nHSDh.shape[-2]):
            o_nHLDh = small_attention(q_nHLDh, k_nHSDh, v_nHSDh, keep_xQS=tails.keep_n1LS)
        else:
            o_nHLDh = F.scaled_dot_product_attention(q_nHLDh, k_nHSDh, v_nHSDh, attn_mask=tails.keep_n1LS)
        n, H, L, Dh = o_nHLDh.shape
        return o_nHLDh.transpose(1, 2).reshape(n * L, H, Dh)[tails.valid_V]

    def _attend(self, q_THDh: torch.Tensor, k_TGDh: torch.Tensor, v_TGDh: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        """Attention output [T, H, Dh] of sequences that each attend to themselves (and their caches)."""
        T = q_THDh.shape[0]
        lens = batch.seq_lens
        if batch.caches is None and len(set(lens)) == 1:
            # Equal-length sequences without caches (the [B, T] trainer path): one call.
            B, t = len(lens), lens[0]
            q_BHtDh = q_THDh.view(B, t, self.n_heads, -1).transpose(1, 2)
            k_BHtDh = self._expand_kv(k_TGDh.view(B, t, self.n_kv, -1).transpose(1, 2))
            v_BHtDh = self._expand_kv(v_TGDh.view(B, t, self.n_kv, -1).transpose(1, 2))
            if use_small_attention(q_BHtDh, t):
                o_BHtDh = small_attention(q_BHtDh, k_BHtDh, v_BHtDh, causal=True)
            else:
                o_BHtDh = F.scaled_dot_product_attention(q_BHtDh, k_BHtDh, v_BHtDh, is_causal=True)
            return o_BHtDh.transpose(1, 2).reshape(T, self.n_heads, self.head_dim)
        out_THDh = torch.empty_like(q_THDh)
        caches, rows = batch.caches, batch.decode
        batched: set[int] = set()
        if rows is not None and len(rows.seqs) == T:  # a pure decode step: no gather, no scatter
            return self._decode_batch(q_THDh, k_TGDh, v_TGDh, rows)
        if rows is not None:
            out_THDh[rows.rows_B] = self._decode_batch(q_THDh[rows.rows_B], k_TGDh[rows.rows_B], v_TGDh[rows.rows_B], rows)
            batched |= rows.seqs
        for group in batch.fresh:
            out_THDh[group.rows_N] = self._fresh_batch(q_THDh[group.rows_N], k_TGDh[group.rows_N], v_TGDh[group.rows_N], group)
            batched |= group.seqs
        for i, (start, t) in enumerate(zip(batch.offsets, lens)):
            if i in batched:
                continue
            cache = None if caches is None else caches[i]
            q_1HtDh = q_THDh[start : start + t].transpose(0, 1)[None]
            k_GtDh = k_TGDh[start : start + t].transpose(0, 1)
            v_GtDh = v_TGDh[start : start + t].transpose(0, 1)
            past = 0
            if cache is not None:
                past = cache.length
                keys_GSDh, values_GSDh = cache.keys(self.layer), cache.values(self.layer)
                keys_GSDh[:, past : past + t] = k_GtDh
                values_GSDh[:, past : past + t] = v_GtDh
                k_GtDh = keys_GSDh[:, : past + t]
                v_GtDh = values_GSDh[:, : past + t]
            # SDPA's is_causal aligns top-left, so a chunk after a cached prefix needs a mask.
            mask = None if past == 0 else _causal_mask(t, past, q_THDh.device)
            o_1HtDh = F.scaled_dot_product_attention(
                q_1HtDh, self._expand_kv(k_GtDh)[None], self._expand_kv(v_GtDh)[None], attn_mask=mask, is_causal=past == 0
            )
            out_THDh[start : start + t] = o_1HtDh[0].transpose(0, 1)
        return out_THDh
