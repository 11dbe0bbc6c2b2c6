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
3. Holds as symbols only the sizes that vary (requests, span, the pool's slots and
   positions; weights stay constants), each its own symbol: requests finishing, keys
   growing and the pool growing change no graph; one compile (seconds, cached on disk by
   inductor) serves every step. dynamo's recompile limit is per process; an engine past
   it decodes eagerly (with a warning) instead of failing.

The logits equal the eager forward's up to summation order (~1e-6); the routing is the
top-k of the same router probabilities. A step with prefill chunks runs eagerly.
"""

from __future__ import annotations

import warnings

import torch
import torch._dynamo
import torch.fx.experimental._config

from lego_rl.model import KVCache, MoeBlock, MoeForCausalLM, ROUTING_DTYPE, route
from lego_rl.model.attention import rope_cos_sin
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
    span_S: torch.Tensor,
    k_LNGCDh: torch.Tensor,
    v_LNGCDh: torch.Tensor,
    weights: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits [B, V], routing [B, L_moe, K], new keys [B, L, G, Dh], new values [B, L, G, Dh]).

    The whole pool comes in (N slots, C positions) and is sliced here, so its growth changes
    sizes the graph holds as symbols rather than the strides of a view it would specialize on.
    `span_S` is arange(S): its length is the span.
    """
    config = model.config
    H, G, Dh = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    B, S = ids_B.shape[0], span_S.shape[0]
    k_LBGSDh, v_LBGSDh = k_LNGCDh[:, :B, :, :S], v_LNGCDh[:, :B, :, :S]
    x_BD = model.model.embed_tokens(ids_B)
    cos_BDh, sin_BDh = rope_cos_sin(pos_B, Dh, config.rope_theta, x_BD.dtype)
    cached_B111S = (span_S[None, :] < pos_B[:, None])[:, None, None, None, :]
    keys, values, chosen = [], [], []
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        q_BHDh, k_BGDh, v_BGDh = attn.project(layer.input_layernorm(x_BD), cos_BDh, sin_BDh, weights[i])
        o_BGrDh = _attend(q_BHDh.reshape(B, G, H // G, Dh), k_BGDh, v_BGDh, k_LBGSDh[i], v_LBGSDh[i], cached_B111S)
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
        # Only the sizes that vary are symbols (marked per call); the weights' sizes stay constants.
        self._compiled = torch.compile(_decode, fullgraph=True)
        self.steps = 0
        """Decode steps this graph ran."""
        self.disabled: str | None = None
        """Why the graph stopped being used (the engine then decodes eagerly), or None."""

    def fits(self, caches: list[KVCache]) -> bool:
        """Whether a decode step of these caches (one new token each) can run here: they hold slots
        0..B-1 of one pool in order, B >= 2, and at least two positions are cached (symbolic sizes
        specialize at 1: a lone request would compile a second graph)."""
        pool = caches[0].pool
        return (
            self.disabled is None and pool is not None and len(caches) >= 2 and max(c.length for c in caches) >= 2
            and all(c.pool is pool and c.slot == i for i, c in enumerate(caches))
        )

    def run(self, tokens: list[int], caches: list[KVCache]) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Feed one token per cache (`fits` must hold): (logits [B, V], routing [B, L_moe, K]), the caches
        advanced by one; or None, nothing changed, when the graph cannot run (`disabled` says why)."""
        for c in caches:
            c.reserve(c.length + 1)
        pool = caches[0].pool
        assert pool is not None
        device = pool.k_LNGSDh.device
        lengths = [c.length for c in caches]
        ids_B, pos_B = torch.tensor(tokens, device=device), torch.tensor(lengths, device=device)
        span_S = torch.arange(max(lengths), device=device)
        for t, dims in ((ids_B, 0), (pos_B, 0), (span_S, 0), (pool.k_LNGSDh, (1, 3)), (pool.v_LNGSDh, (1, 3))):
            torch._dynamo.mark_dynamic(t, dims)
        weights = [layer.self_attn.fused_weights() for layer in self.model.model.layers]
        try:
            # Without duck sizing, sizes that happen to be equal (32 requests, 32 positions) stay distinct symbols
            # instead of one that a later step's unequal sizes would recompile for.
            with torch.fx.experimental._config.patch(use_duck_shape=False):
                logits_BV, routing_BLK, k_BLGDh, v_BLGDh = self._compiled(
                    self.model, ids_B, pos_B, span_S, pool.k_LNGSDh, pool.v_LNGSDh, weights
                )
        except torch._dynamo.exc.FailOnRecompileLimitHit as error:
            # dynamo's recompile limit is per process and shared by every engine's graphs (one per model
            # shape): past it, this engine decodes eagerly rather than failing the step's requests.
            self.disabled = f"torch.compile's recompile limit is reached ({error}); decoding eagerly"
            warnings.warn(f"lego_rl engine: {self.disabled}", RuntimeWarning, stacklevel=2)
            return None
        slots_B = torch.arange(len(caches), device=device)
        pool.k_LNGSDh[:, slots_B, :, pos_B] = k_BLGDh
        pool.v_LNGSDh[:, slots_B, :, pos_B] = v_BLGDh
        for c in caches:
            c.length += 1
        self.steps += 1
        return logits_BV, routing_BLK
