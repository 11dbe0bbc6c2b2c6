"""RMSNorm, rotary embedding, grouped-query attention over packed sequences and KV caches.

Shape legend: T packed tokens (all sequences of a batch, end to end), D model width,
H query heads, G key/value heads, Dh head width, S cached positions of one sequence,
L decoder layers.

Design:
1. Activations are packed [T, D]; `PackedBatch` says where each sequence starts, so a
   batch of prefills and single-token decodes is one forward pass.
2. Attention runs per sequence over that sequence's own KV cache: a sequence's numerics do
   not depend on which other sequences share the batch, and there is no padding.
3. Numerics follow HF Qwen3-MoE: RMSNorm in fp32 and weight applied after the cast back,
   q/k RMSNorm per head before RoPE, rotate-half RoPE with cos/sin built in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import Config


class RMSNorm(nn.Module):
    """y = w * (x / sqrt(mean(x^2) + eps)), normalised in fp32 like HF Qwen3MoeRMSNorm."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x_xD: torch.Tensor) -> torch.Tensor:
        x32 = x_xD.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x_xD.dtype)


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


class KVCache:
    """Keys and values of one sequence for every layer, preallocated to `capacity` positions."""

    def __init__(self, config: Config, capacity: int, *, dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        shape = (config.num_hidden_layers, config.num_key_value_heads, capacity, config.head_dim)
        self.k_LGSDh = torch.zeros(shape, dtype=dtype, device=device)
        self.v_LGSDh = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0
        """Positions filled; a forward writes its new tokens at [length, length + t)."""

    @property
    def capacity(self) -> int:
        return self.k_LGSDh.shape[2]

    def reserve(self, positions: int) -> None:
        """Make room for `positions` in total, at least doubling so appends stay amortised O(1)."""
        if positions <= self.capacity:
            return
        grown = max(positions, 2 * self.capacity)
        pad = (0, 0, 0, grown - self.capacity)  # F.pad pads the last dims first: Dh by 0, S at the end
        self.k_LGSDh = F.pad(self.k_LGSDh, pad)
        self.v_LGSDh = F.pad(self.v_LGSDh, pad)


@dataclass(slots=True)
class PackedBatch:
    """Where each sequence's new tokens sit in the packed [T] axis, and its cache if any."""

    seq_lens: list[int]
    """New tokens of each sequence, in packing order; they sum to T."""
    caches: list[KVCache] | None = None
    """One cache per sequence (engine), or None: each sequence attends only to itself (trainer)."""

    @property
    def offsets(self) -> list[int]:
        out, acc = [], 0
        for n in self.seq_lens:
            out.append(acc)
            acc += n
        return out


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

    def _expand_kv(self, kv_xGSDh: torch.Tensor) -> torch.Tensor:
        """Repeat each KV head for its H/G query heads (torch 2.15's CPU SDPA is ~100x slower with enable_gqa)."""
        groups = self.n_heads // self.n_kv
        return kv_xGSDh if groups == 1 else kv_xGSDh.repeat_interleave(groups, dim=-3)

    def _decode_one(self, q_HDh: torch.Tensor, k_GDh: torch.Tensor, v_GDh: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One new token of one sequence against its cache (the decode hot path: few ops)."""
        past = cache.length
        k_GSDh, v_GSDh = cache.k_LGSDh[self.layer], cache.v_LGSDh[self.layer]
        k_GSDh[:, past] = k_GDh
        v_GSDh[:, past] = v_GDh
        # One query sees every cached key, so fold each KV group's query heads into the
        # query axis: [G, H/G, Dh] against [G, S, Dh], no copy of the cache.
        o_GrDh = F.scaled_dot_product_attention(
            q_HDh.view(self.n_kv, self.n_heads // self.n_kv, self.head_dim), k_GSDh[:, : past + 1], v_GSDh[:, : past + 1]
        )
        return o_GrDh.view(self.n_heads, self.head_dim)

    def forward(
        self, x_TD: torch.Tensor, cos_TDh: torch.Tensor, sin_TDh: torch.Tensor, batch: PackedBatch
    ) -> torch.Tensor:
        T = x_TD.shape[0]
        q_THDh = _apply_rope(self.q_norm(self.q_proj(x_TD).view(T, self.n_heads, self.head_dim)), cos_TDh, sin_TDh)
        k_TGDh = _apply_rope(self.k_norm(self.k_proj(x_TD).view(T, self.n_kv, self.head_dim)), cos_TDh, sin_TDh)
        v_TGDh = self.v_proj(x_TD).view(T, self.n_kv, self.head_dim)
        lens = batch.seq_lens
        if batch.caches is None and len(set(lens)) == 1:
            # Equal-length sequences without caches (the [B, T] trainer path): one call.
            B, t = len(lens), lens[0]
            o_BHtDh = F.scaled_dot_product_attention(
                q_THDh.view(B, t, self.n_heads, -1).transpose(1, 2),
                self._expand_kv(k_TGDh.view(B, t, self.n_kv, -1).transpose(1, 2)),
                self._expand_kv(v_TGDh.view(B, t, self.n_kv, -1).transpose(1, 2)),
                is_causal=True,
            )
            return self.o_proj(o_BHtDh.transpose(1, 2).reshape(T, -1))
        out_THDh = torch.empty_like(q_THDh)
        for i, (start, t) in enumerate(zip(batch.offsets, lens)):
            cache = None if batch.caches is None else batch.caches[i]
            if cache is not None and t == 1:
                out_THDh[start] = self._decode_one(q_THDh[start], k_TGDh[start], v_TGDh[start], cache)
                continue
            q_1HtDh = q_THDh[start : start + t].transpose(0, 1)[None]
            k_GtDh = k_TGDh[start : start + t].transpose(0, 1)
            v_GtDh = v_TGDh[start : start + t].transpose(0, 1)
            past = 0
            if cache is not None:
                past = cache.length
                cache.k_LGSDh[self.layer, :, past : past + t] = k_GtDh
                cache.v_LGSDh[self.layer, :, past : past + t] = v_GtDh
                k_GtDh = cache.k_LGSDh[self.layer, :, : past + t]
                v_GtDh = cache.v_LGSDh[self.layer, :, : past + t]
            # SDPA's is_causal aligns top-left, so a chunk after a cached prefix needs a mask.
            mask = None if past == 0 else _causal_mask(t, past, x_TD.device)
            o_1HtDh = F.scaled_dot_product_attention(
                q_1HtDh, self._expand_kv(k_GtDh)[None], self._expand_kv(v_GtDh)[None], attn_mask=mask, is_causal=past == 0
            )
            out_THDh[start : start + t] = o_1HtDh[0].transpose(0, 1)
        return self.o_proj(out_THDh.reshape(T, -1))
