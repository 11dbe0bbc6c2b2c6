"""Decoder-only MoE transformer with HF Qwen3-MoE module names, routing record and replay.

Shape legend: B batch, T tokens (per sequence for [B, T] inputs, packed otherwise),
D model width, V vocabulary, L MoE layers (only layers with a router; dense layers have no
routing), K experts per token.

Parameter names equal transformers 5's Qwen3MoeForCausalLM state dict
(`model.layers.{i}.mlp.experts.gate_up_proj`, `model.layers.{i}.mlp.gate.weight`, ...), so
a fused-layout checkpoint loads as is; `checkpoint.py` converts the per-expert layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .attention import Attention, KVCache, PackedBatch, RMSNorm, rope_cos_sin
from .config import Config
from .moe import MoeBlock, RoutingShapeError, SwiGLU

# Routing leaves the model as int16, the dtype vLLM returns routed_experts in.
ROUTING_DTYPE = torch.int16


@dataclass(slots=True)
class ModelOutput:
    """Logits and, when asked, the routing every MoE layer used."""

    logits: torch.Tensor
    """[B, T, V] for [B, T] input; [T, V] packed, or [R, V] for the requested `logits_rows`."""
    routing: torch.Tensor | None = None
    """[B, T, L, K] or [T, L, K], int16 expert ids, layers in `Config.moe_layers` order."""


class DecoderLayer(nn.Module):
    def __init__(self, config: Config, layer: int) -> None:
        super().__init__()
        self.self_attn = Attention(config, layer)
        self.mlp: MoeBlock | SwiGLU = (
            MoeBlock(config) if config.is_moe_layer(layer) else SwiGLU(config.hidden_size, config.intermediate_size)
        )
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        x_TD: torch.Tensor,
        cos_TDh: torch.Tensor,
        sin_TDh: torch.Tensor,
        batch: PackedBatch,
        replay_TK: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        x_TD = x_TD + self.self_attn(self.input_layernorm(x_TD), cos_TDh, sin_TDh, batch)
        h_TD = self.post_attention_layernorm(x_TD)
        if isinstance(self.mlp, MoeBlock):
            y_TD, idx_TK = self.mlp(h_TD, replay_TK)
            return x_TD + y_TD, idx_TK
        return x_TD + self.mlp(h_TD), None


class Backbone(nn.Module):
    """HF's `model.` prefix: embeddings, decoder layers, final norm."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class MoeForCausalLM(nn.Module):
    """The policy: token ids in, next-token logits (and routing) out."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        """With tied word embeddings, the output projection is the embedding: one tensor, one name
        (`model.embed_tokens.weight`). Again after `to_empty`, which materialises the two separately."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        positions: torch.Tensor | None = None,
        seq_lens: list[int] | None = None,
        caches: list[KVCache] | None = None,
        routing_replay: torch.Tensor | None = None,
        return_routing: bool = False,
        logits_rows: torch.Tensor | None = None,
        prefix_of: list[int] | None = None,
    ) -> ModelOutput:
        """Run the decoder.

        input_ids: [B, T] (B sequences of length T) or [T] packed (sequences end to end,
            lengths in `seq_lens`; one sequence when omitted).
        positions: same shape as input_ids; default 0.. per sequence, after its cache.
        caches: one KVCache per sequence; new keys/values are appended and lengths advanced.
        routing_replay: [B, T, L, K] or [T, L, K] expert ids to use instead of the router's
            top-k; gate weights still come from the live router (R3).
        logits_rows: [R] packed row indices; only those rows go through the LM head.
        prefix_of: packed input without caches: for each sequence, the earlier sequence it
            continues, or -1. A continuing sequence (a "tail") attends to all of that
            sequence's tokens first and its positions start after them, as if they were
            repeated before it: a GRPO group's shared prompt is computed once. Tails come
            after every other sequence (see attention.TailRows).
        """
        batched = input_ids.dim() == 2
        ids_T = input_ids.reshape(-1)
        T = ids_T.shape[0]
        if batched:
            B, t = input_ids.shape
            seq_lens = [t] * B
        elif seq_lens is None:
            seq_lens = [T]
        if sum(seq_lens) != T:
            raise ValueError(f"seq_lens sum to {sum(seq_lens)} but input has {T} tokens")
        if caches is not None and len(caches) != len(seq_lens):
            raise ValueError(f"{len(caches)} caches for {len(seq_lens)} sequences")
        if caches is not None:
            for cache, n in zip(caches, seq_lens):
                cache.reserve(cache.length + n)
        batch = PackedBatch(seq_lens=list(seq_lens), caches=caches, device=ids_T.device, prefix_of=prefix_of)
        if positions is None:
            starts = None if caches is None else [c.length for c in caches]
            if batch.tails is not None and prefix_of is not None:
                starts = [seq_lens[p] if p >= 0 else 0 for p in prefix_of]
            positions_T = _positions(seq_lens, starts, ids_T.device)
        else:
            positions_T = positions.reshape(-1)
        replay_TLK = None
        n_moe = len(self.config.moe_layers)
        if routing_replay is not None:
            expected = (*input_ids.shape, n_moe, self.config.num_experts_per_tok)
            if tuple(routing_replay.shape) != expected:
                raise RoutingShapeError(
                    f"routing_replay has shape {tuple(routing_replay.shape)}; expected {expected} "
                    "(input shape, MoE layers, experts per token)"
                )
            replay_TLK = routing_replay.reshape(T, n_moe, self.config.num_experts_per_tok)

        x_TD = self.model.embed_tokens(ids_T)
        cos_TDh, sin_TDh = rope_cos_sin(positions_T, self.config.head_dim, self.config.rope_theta, x_TD.dtype)
        chosen: list[torch.Tensor] = []
        for layer in self.model.layers:
            replay_TK = None if replay_TLK is None else replay_TLK[:, len(chosen)]
            x_TD, idx_TK = layer(x_TD, cos_TDh, sin_TDh, batch, replay_TK)
            if idx_TK is not None:
                chosen.append(idx_TK)
        if caches is not None:
            for cache, n in zip(caches, seq_lens):
                cache.length += n
        if logits_rows is not None:
            x_TD = x_TD[logits_rows]
        logits = self.lm_head(self.model.norm(x_TD))
        routing = None
        if return_routing:
            routing = (
                torch.stack(chosen, dim=1).to(ROUTING_DTYPE)
                if chosen
                else torch.zeros(T, 0, self.config.num_experts_per_tok, dtype=ROUTING_DTYPE)
            )
        if batched:
            if logits_rows is None:
                logits = logits.view(*input_ids.shape, -1)
            if routing is not None:
                routing = routing.view(*input_ids.shape, *routing.shape[1:])
        return ModelOutput(logits=logits, routing=routing)


def _positions(seq_lens: list[int], starts: list[int] | None, device: torch.device) -> torch.Tensor:
    """[T] position of each packed token: 0.. per sequence, after its cached `starts` if given."""
    if all(n == 1 for n in seq_lens):  # a decode step: each token sits right after its cache
        return torch.tensor(starts if starts is not None else [0] * len(seq_lens), device=device)
    lens_S = torch.tensor(seq_lens, device=device)
    # Within-sequence index = packed index - where the sequence starts in the packing.
    first_S = torch.cumsum(lens_S, 0) - lens_S
    if starts is not None:
        first_S = first_S - torch.tensor(starts, device=device)
    return torch.arange(int(lens_S.sum()), device=device) - torch.repeat_interleave(first_S, lens_S)


def init_weights(model: MoeForCausalLM, *, seed: int, std: float = 0.02) -> None:
    """Random init as HF PreTrainedModel does for Qwen3-MoE: N(0, initializer_range=0.02), norms 1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std)
