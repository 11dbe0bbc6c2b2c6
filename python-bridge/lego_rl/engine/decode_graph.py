"""The engine's decode step as one compiled graph (`torch.compile`), for steps where every running request decodes.

Shape legend: B rows (the requests, in slot order), S cached key positions attended (the
longest cache), L layers, G key/value heads, r query heads per key/value head, Dh head width,
V vocabulary, K experts per token.

Why: a decode step of a small model is ~250 tiny eager ops, and on CPU their dispatch costs
as much as their arithmetic. Compiled as one graph, the elementwise ops fuse into a few
kernels and only the GEMMs remain calls. The eager forward cannot be compiled as it is: it
plans work from values it reads back (the busiest expert's row count) and writes into the
KV pool, so each call would run several small graphs behind guards. This path:

1. Runs every expert on every row, weighted 0 where not chosen (`all_experts_swiglu`): no
   read-back, the same values as the grouped paths up to GEMM rounding.
2. Mutates nothing: each row attends over its cached keys (positions before its own, the
   rest masked) and, as one more score, its own new key; the new keys and values leave the
   graph and are written into the pool by one indexed copy each. A graph that wrote into
   the pool would copy it.
3. Is compiled with symbolic sizes (`dynamic=True`): requests finishing and keys growing
   change no graph; one compile (seconds, cached on disk by inductor) serves every step.

The logits equal the eager forward's up to summation order (~1e-6); the routing is the
top-k of the same router probabilities. A step with prefill chunks runs eagerly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lego_rl.model import KVCache, MoeBlock, MoeForCausalLM, ROUTING_DTYPE, route
from lego_rl.model.attention import _apply_rope, rms_normalized, rope_cos_sin
from lego_rl.model.moe import all_experts_swiglu


def _attend(
    q_BGrDh: torch.Tensor, k_BGDh: torch.Tensor, v_BGDh: torch.Tensor, keys_BGSDh: torch.Tensor,
    values_BGSDh: torch.Tensor, cached_B111S: torch.Tensor,
) -> torch.Tensor:
    """softmax over [cached keys, own new key] of q k^T / sqrt(Dh), times [cached values, own new value]."""
    scale = q_BGrDh.shape[-1] ** -0.5
    cached_BGrS = torch.matmul(q_BGrDh, keys_BGSDh.transpose(-1, -2)).masked_fill(~cached_B111S[:, 0], float("-inf"))
    own_BGr1 = (q_BGrDh * k_BGDh[:, :, None, :]).sum(-1, keepdim=True)
    p_BGrS1 = torch.softmax(torch.cat((cached_BGrS, own_BGr1), dim=-1) * scale, dim=-1)
    S = keys_BGSDh.shape[2]
    return torch.matmul(p_BGrS1[..., :S], values_BGSDh) + p_BGrS1[..., S:] * v_BGDh[:, :, None, :]


def _decode(
    model: MoeForCausalLM,
    ids_B: torch.Tensor,
    pos_B: torch.Tensor,
    k_LBGSDh: torch.Tensor,
    v_LBGSDh: torch.Tensor,
    weights: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits [B, V], routing [B, L_moe, K], new keys [B, L, G, Dh], new values [B, L, G, Dh])."""
    config = model.config
    H, G, Dh = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    B, S = ids_B.shape[0], k_LBGSDh.shape[3]
    x_BD = model.model.embed_tokens(ids_B)
    cos_BDh, sin_BDh = rope_cos_sin(pos_B, Dh, config.rope_theta, x_BD.dtype)
    cached_B111S = (torch.arange(S, device=ids_B.device)[None, :] < pos_B[:, None])[:, None, None, None, :]
    keys, values, chosen = [], [], []
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        qkv_w, qkv_b, qk_norm_w = weights[i]
        qkv_BND = F.linear(layer.input_layernorm(x_BD), qkv_w, qkv_b).view(B, H + 2 * G, Dh)
        qk_BNDh = _apply_rope(qk_norm_w * rms_normalized(qkv_BND[:, : H + G], attn.q_norm.eps), cos_BDh, sin_BDh)
        k_BGDh, v_BGDh = qk_BNDh[:, H:], qkv_BND[:, H + G :]
        o_BGrDh = _attend(qk_BNDh[:, :H].reshape(B, G, H // G, Dh), k_BGDh, v_BGDh, k_LBGSDh[i], v_LBGSDh[i], cached_B111S)
        x_BD = x_BD + attn.o_proj(o_BGrDh.reshape(B, H * Dh))
        h_BD = layer.post_attention_layernorm(x_BD)
        mlp = layer.mlp
        if isinstance(mlp, MoeBlock):
            idx_BK, w_BK = route(mlp.gate(h_BD), mlp.top_k, mlp.norm_topk_prob)
            y_BD = all_experts_swiglu(h_BD, idx_BK, w_BK, mlp.experts.gate_up_proj, mlp.experts.down_proj)
            if mlp.shared_expert is not None:
                y_BD = y_BD + torch.sigmoid(mlp.shared_expert_gate(h_BD)) * mlp.shared_expert(h_BD)
            chosen.append(idx_BK)
        else:
            y_BD = mlp(h_BD)
        x_BD = x_BD + y_BD
        keys.append(k_BGDh)
        values.append(v_BGDh)
    logits_BV = model.lm_head(model.model.norm(x_BD))
    routing = torch.stack(chosen, dim=1).to(ROUTING_DTYPE) if chosen else torch.zeros(B, 0, config.num_experts_per_tok, dtype=ROUTING_DTYPE)
    return logits_BV, routing, torch.stack(keys, dim=1), torch.stack(values, dim=1)


class DecodeGraph:
    """Runs pure decode steps of one engine's model through a compiled graph (see the module docstring)."""

    def __init__(self, model: MoeForCausalLM) -> None:
        self.model = model
        self._compiled = torch.compile(_decode, fullgraph=True, dynamic=True)
        self.steps = 0
        """Decode steps this graph ran."""

    @staticmethod
    def fits(caches: list[KVCache]) -> bool:
        """Whether a decode step of these caches (one new token each) can run here: they hold slots
        0..B-1 of one pool in order (their keys are then one view of it), B >= 2, and at least two
        positions are cached (symbolic sizes specialize at 1: a lone request would compile a second graph)."""
        pool = caches[0].pool
        return (
            pool is not None and len(caches) >= 2 and max(c.length for c in caches) >= 2
            and all(c.pool is pool and c.slot == i for i, c in enumerate(caches))
        )

    def run(self, tokens: list[int], caches: list[KVCache]) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed one token per cache (`fits` must hold); (logits [B, V], routing [B, L_moe, K]); caches advance by one."""
        for c in caches:
            c.reserve(c.length + 1)
        pool = caches[0].pool
        assert pool is not None
        device = pool.k_LNGSDh.device
        B, lengths = len(caches), [c.length for c in caches]
        S = max(lengths)
        pos_B = torch.tensor(lengths, device=device)
        logits_BV, routing_BLK, k_BLGDh, v_BLGDh = self._compiled(
            self.model, torch.tensor(tokens, device=device), pos_B, pool.k_LNGSDh[:, :B, :, :S], pool.v_LNGSDh[:, :B, :, :S],
            [layer.self_attn.fused_weights() for layer in self.model.model.layers],
        )
        slots_B = torch.arange(B, device=device)
        pool.k_LNGSDh[:, slots_B, :, pos_B] = k_BLGDh
        pool.v_LNGSDh[:, slots_B, :, pos_B] = v_BLGDh
        for c in caches:
            c.length += 1
        self.steps += 1
        return logits_BV, routing_BLK
