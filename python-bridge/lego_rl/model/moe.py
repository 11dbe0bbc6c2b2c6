"""Mixture-of-experts feed-forward: softmax top-k router, SwiGLU experts, optional shared expert.

Shape legend: T tokens, D model width, E experts, F expert FFN width, K experts per token,
N token copies grouped by expert (N = T*K on one rank).

Design:
1. `route` picks experts (or takes replayed ones) and computes gate weights as
   softmax-over-all-experts gathered at the chosen indices, renormalised over K when
   `norm_topk_prob` (HF Qwen3MoeTopKRouter). Under replay the indices come from the rollout
   engine but the weights still come from the live router logits, so the router gets
   gradients: the R3 recipe (rollout routing replay).
2. Experts are stored fused like transformers 5 (`gate_up_proj` [E, 2F, D] with the gate
   half first, `down_proj` [E, D, F]). `grouped_swiglu` takes tokens already sorted by
   expert with per-expert counts, so expert parallelism can all-to-all the sorted copies
   between `dispatch` and it and run it on the local experts only.
3. Each token's expert outputs are summed in expert-id order, as HF does.
4. A handful of tokens (a decode step) runs every expert on every token in two GEMMs and
   weighs the unchosen ones by exactly 0 (`all_experts_swiglu`): past a few experts, one
   small GEMM per expert costs more in dispatch than the wasted FLOPs. A few dozen tokens
   (batched decode) place their copies straight into per-expert slots and run two batched
   GEMMs (`slotted_swiglu`), without sorting. The choice is by size only, never by whether
   routing is replayed, so replay stays bit-exact.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import Config
from .derived import DerivedWeights


class RoutingShapeError(ValueError):
    """A replayed routing tensor does not fit the batch or names an expert that does not exist."""


def route(
    logits_TE: torch.Tensor, top_k: int, norm_topk_prob: bool, replay_TK: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chosen experts idx_TK (int64) and gate weights w_TK (logits' dtype).

    The same ops run whether the indices are chosen here or replayed, so replaying the
    routing a forward pass chose reproduces that pass bit for bit.
    """
    probs_TE = F.softmax(logits_TE, dim=-1, dtype=torch.float32)
    if replay_TK is None:
        idx_TK = torch.topk(probs_TE, top_k, dim=-1).indices
    else:
        if replay_TK.shape != (logits_TE.shape[0], top_k):
            raise RoutingShapeError(f"routing replay slice has shape {tuple(replay_TK.shape)}, expected {(logits_TE.shape[0], top_k)}")
        idx_TK = replay_TK.to(device=logits_TE.device, dtype=torch.int64)
        if idx_TK.numel() and (int(idx_TK.min()) < -1 or int(idx_TK.max()) >= logits_TE.shape[1]):
            raise RoutingShapeError(f"routing replay names experts outside 0..{logits_TE.shape[1] - 1}")
        unrecorded_TK = idx_TK < 0
        if unrecorded_TK.any():
            # -1 marks a token the engine did not record routing for: it routes itself.
            idx_TK = torch.where(unrecorded_TK, torch.topk(probs_TE, top_k, dim=-1).indices, idx_TK)
    w_TK = probs_TE.gather(1, idx_TK)
    if norm_topk_prob:
        w_TK = w_TK / w_TK.sum(dim=-1, keepdim=True)
    return idx_TK, w_TK.to(logits_TE.dtype)


def dispatch(idx_TK: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Group token copies by expert: (order_N into the flat T*K copies, token_N, counts per expert)."""
    flat_N = idx_TK.reshape(-1)
    order_N = torch.argsort(flat_N, stable=True)  # stable: within an expert, tokens keep their order
    token_N = torch.div(order_N, idx_TK.shape[1], rounding_mode="floor")
    counts_E = torch.bincount(flat_N, minlength=num_experts)
    return order_N, token_N, counts_E.tolist()


# Below this many multiply-adds for the busiest expert, one padded batched GEMM over all
# experts beats a GEMM per expert (dispatch-bound; measured on CPU, torch 2.15: up to ~40
# rows per expert on the tiny config, never for a Qwen3-30B-shaped expert).
_PADDED_MAX_MACS_PER_EXPERT = 2_000_000


def grouped_swiglu(
    x_ND: torch.Tensor, counts: list[int], w_gate_up_EFD: torch.Tensor, w_down_EDF: torch.Tensor
) -> torch.Tensor:
    """SwiGLU of expert e on its contiguous run of `counts[e]` rows: down(silu(gate x) * up x).

    `w_gate_up_EFD` is [E, 2F, D] (gate rows then up rows); E here is the local experts, so
    an expert-parallel rank passes its shard and the rows it received for it. Few rows per
    expert run as two batched GEMMs over zero-padded groups, more as one GEMM per expert.
    """
    ffn, width = w_down_EDF.shape[2], w_down_EDF.shape[1]
    if counts and max(counts) * 3 * ffn * width <= _PADDED_MAX_MACS_PER_EXPERT:
        return padded_swiglu(x_ND, counts, w_gate_up_EFD, w_down_EDF)
    if has_grouped_mm(x_ND.device, x_ND.dtype):
        return grouped_mm_swiglu(x_ND, counts, w_gate_up_EFD, w_down_EDF)
    return looped_swiglu(x_ND, counts, w_gate_up_EFD, w_down_EDF)


_GROUPED_MM_WORKS: dict[tuple[str, torch.dtype], bool] = {}


def has_grouped_mm(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether torch._grouped_mm runs for this device type and dtype (probed once on a tiny case).

    It is a private op (the one torchtitan's MoE uses): CPU runs every dtype, CUDA only
    some dtypes and architectures, and other builds may lack it, so ask instead of assuming.
    """
    key = (device.type, dtype)
    if key not in _GROUPED_MM_WORKS:
        try:
            a = torch.ones(3, 4, device=device, dtype=dtype)
            b = torch.ones(2, 4, 8, device=device, dtype=dtype)
            torch._grouped_mm(a, b, offs=torch.tensor([1, 3], device=device, dtype=torch.int32))
            _GROUPED_MM_WORKS[key] = True
        except (AttributeError, RuntimeError, NotImplementedError):
            _GROUPED_MM_WORKS[key] = False
    return _GROUPED_MM_WORKS[key]


def grouped_mm_swiglu(
    x_ND: torch.Tensor, counts: list[int], w_gate_up_EFD: torch.Tensor, w_down_EDF: torch.Tensor
) -> torch.Tensor:
    """`grouped_swiglu` as two grouped GEMMs (torch._grouped_mm) over the experts' runs of rows.

    The same values as `looped_swiglu` (bit for bit on CPU, gradients included), without a
    GEMM call, a weight slice and, in backward, a weight-sized gradient buffer per expert:
    on the 2-core VM 1,600 rows through an [8, 256, 128] gate/up weight took 3.0-3.5 ms
    forward + backward instead of 5.7 ms.
    """
    offs_E = torch.tensor(counts, device=x_ND.device).cumsum(0).to(torch.int32)
    gate_NF, up_NF = torch._grouped_mm(x_ND, w_gate_up_EFD.transpose(1, 2), offs=offs_E).chunk(2, dim=-1)
    return torch._grouped_mm(F.silu(gate_NF) * up_NF, w_down_EDF.transpose(1, 2), offs=offs_E)


def looped_swiglu(
    x_ND: torch.Tensor, counts: list[int], w_gate_up_EFD: torch.Tensor, w_down_EDF: torch.Tensor
) -> torch.Tensor:
    """`grouped_swiglu` as one pair of GEMMs per expert."""
    y_ND = torch.empty_like(x_ND)
    start = 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        x_nD = x_ND[start : start + n]
        gate_nF, up_nF = F.linear(x_nD, w_gate_up_EFD[e]).chunk(2, dim=-1)
        y_ND[start : start + n] = F.linear(F.silu(gate_nF) * up_nF, w_down_EDF[e])
        start += n
    return y_ND


def padded_swiglu(
    x_ND: torch.Tensor, counts: list[int], w_gate_up_EFD: torch.Tensor, w_down_EDF: torch.Tensor
) -> torch.Tensor:
    """`grouped_swiglu` as two batched GEMMs: each expert's rows padded with zeros to the busiest expert's count C."""
    E, C, (N, D) = len(counts), max(counts), x_ND.shape
    counts_E = torch.tensor(counts, device=x_ND.device)
    expert_N = torch.repeat_interleave(torch.arange(E, device=x_ND.device), counts_E)
    first_E = torch.cumsum(counts_E, 0) - counts_E
    slot_N = expert_N * C + torch.arange(N, device=x_ND.device) - first_E[expert_N]  # row e*C + rank within expert e
    x_ECD = x_ND.new_zeros(E * C, D).index_copy(0, slot_N, x_ND).view(E, C, D)
    gate_ECF, up_ECF = torch.bmm(x_ECD, w_gate_up_EFD.transpose(1, 2)).chunk(2, dim=-1)
    y_ECD = torch.bmm(F.silu(gate_ECF) * up_ECF, w_down_EDF.transpose(1, 2))
    return y_ECD.reshape(E * C, D).index_select(0, slot_N)


# Multiply-adds that cost about as much as running one expert's GEMMs separately (measured
# on CPU, torch 2.15: ~100 us of dispatch per expert). Running all E experts on T tokens
# wastes T*(E-K)*3*F*D; below E times this, it is the cheaper way (T <= 24 for the tiny
# config, never for a Qwen3-30B-shaped layer).
_PER_EXPERT_DISPATCH_MACS = 900_000


def prefers_all_experts(tokens: int, num_experts: int, top_k: int, ffn: int, width: int) -> bool:
    """Whether `all_experts_swiglu` is cheaper than the grouped path for this many tokens."""
    return tokens * (num_experts - top_k) * 3 * ffn * width <= num_experts * _PER_EXPERT_DISPATCH_MACS


def all_experts_swiglu(
    x_TD: torch.Tensor, idx_TK: torch.Tensor, w_TK: torch.Tensor, w_gate_up_EFD: torch.Tensor, w_down_EDF: torch.Tensor
) -> torch.Tensor:
    """Sum over chosen experts of w * SwiGLU_e(x), computing every expert and weighing the rest 0.

    Same result as dispatch + grouped_swiglu up to GEMM rounding; the sum runs in expert-id
    order like HF's, and the zero-weighted terms add exactly 0.
    """
    T, D = x_TD.shape
    E, F2, _ = w_gate_up_EFD.shape
    gate_TEF, up_TEF = F.linear(x_TD, w_gate_up_EFD.reshape(E * F2, D)).view(T, E, F2).chunk(2, dim=-1)
    h_ETF = (F.silu(gate_TEF) * up_TEF).transpose(0, 1)
    y_ETD = torch.bmm(h_ETF, w_down_EDF.transpose(1, 2))
    w_TE = torch.zeros(T, E, dtype=w_TK.dtype, device=w_TK.device).scatter_(1, idx_TK, w_TK)
    return (w_TE.t()[:, :, None] * y_ETD).sum(0)


def _in_expert_id_order(idx_TK: torch.Tensor, w_TK: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's chosen experts in id order, with their weights: HF sums a token's terms in
    that order, so the paths that regroup copies keep it (a no-op for the sum of two terms)."""
    idx_TK, order_TK = torch.sort(idx_TK, dim=1)
    return idx_TK, w_TK.gather(1, order_TK)


def slotted_swiglu(
    x_TD: torch.Tensor, idx_TK: torch.Tensor, w_TK: torch.Tensor, w_gate_up_EFD: torch.Tensor, w_down_EDF: torch.Tensor
) -> torch.Tensor | None:
    """Sum over chosen experts of w * SwiGLU_e(x), each copy in a slot of its expert's padded group.

    Copy (t, k) goes to row `rank` of expert idx[t, k]'s group (its rank among that
    expert's copies, in token order), so no sort and no scatter-add are needed: the same
    values as dispatch + `padded_swiglu` + index_add, summed per token in expert-id order.
    Returns None when the busiest expert has too many rows for padding to pay
    (`_PADDED_MAX_MACS_PER_EXPERT`); the caller then groups by sorting.
    """
    T, D = x_TD.shape
    E, ffn, K = w_down_EDF.shape[0], w_down_EDF.shape[2], idx_TK.shape[1]
    # Decide before building anything of size T*K*E: the busiest expert has at least the average.
    if -(-T * K // E) * 3 * ffn * D > _PADDED_MAX_MACS_PER_EXPERT:
        return None
    C = int(torch.bincount(idx_TK.reshape(-1), minlength=E).max())
    if C * 3 * ffn * D > _PADDED_MAX_MACS_PER_EXPERT:
        return None
    idx_TK, w_TK = _in_expert_id_order(idx_TK, w_TK)
    onehot_NE = F.one_hot(idx_TK.reshape(-1), E)
    rank_N = (onehot_NE.cumsum(0) * onehot_NE).sum(1) - 1
    slot_N = idx_TK.reshape(-1) * C + rank_N
    x_ECD = x_TD.new_zeros(E * C, D).index_copy(0, slot_N, x_TD.repeat_interleave(K, 0)).view(E, C, D)
    gate_ECF, up_ECF = torch.bmm(x_ECD, w_gate_up_EFD.transpose(1, 2)).chunk(2, dim=-1)
    y_ECD = torch.bmm(F.silu(gate_ECF) * up_ECF, w_down_EDF.transpose(1, 2))
    y_TKD = y_ECD.reshape(E * C, D).index_select(0, slot_N).view(T, K, D) * w_TK[:, :, None]
    y_TD = y_TKD[:, 0]
    for k in range(1, K):  # left to right, like index_add over the expert-sorted copies
        y_TD = y_TD + y_TKD[:, k]
    return y_TD


class _PermuteRows(torch.autograd.Function):
    """x[index] for a permutation `index`: its gradient is a gather by the inverse permutation.

    Autograd would scatter-add the gradient of a plain gather (index_put with accumulate),
    which on CPU took ~1 ms per MoE layer for 872 rows of the trainer bench; a gather
    takes a few dozen microseconds.
    """

    @staticmethod
    def forward(ctx: Any, x_ND: torch.Tensor, index_N: torch.Tensor, inverse_N: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(inverse_N)
        return x_ND.index_select(0, index_N)

    @staticmethod
    def backward(ctx: Any, grad_ND: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (inverse_N,) = ctx.saved_tensors
        return grad_ND.index_select(0, inverse_N), None, None


def permuted(x_ND: torch.Tensor, index_N: torch.Tensor, inverse_N: torch.Tensor) -> torch.Tensor:
    """x[index] for a permutation `index` (inverse permutation `inverse`) whose gradient is a
    gather, not a scatter-add."""
    return _PermuteRows.apply(x_ND, index_N, inverse_N)


def routed_sum(
    x_TD: torch.Tensor,
    idx_TK: torch.Tensor,
    w_TK: torch.Tensor,
    num_experts: int,
    run_sorted: Callable[[torch.Tensor, list[int]], torch.Tensor],
) -> torch.Tensor:
    """Sum over chosen experts of w * expert(x), with `run_sorted(rows, counts)` computing every
    token copy's expert output from the copies sorted by expert (`counts[e]` rows of expert e).

    Each token's copies are taken in expert-id order (as HF sums them) and moved by
    permutations both ways, so no step scatter-adds: the sum over a token's K terms is a
    left-to-right add of its rows. The single-rank path runs the experts here
    (`sorted_swiglu`); expert parallelism sends the sorted rows to the experts' ranks.
    """
    T, D = x_TD.shape
    K = idx_TK.shape[1]
    idx_TK, w_TK = _in_expert_id_order(idx_TK, w_TK)
    order_N, _, counts = dispatch(idx_TK, num_experts)
    inverse_N = torch.empty_like(order_N)
    inverse_N[order_N] = torch.arange(order_N.numel(), device=order_N.device)
    copies_ND = x_TD[:, None, :].expand(T, K, D).reshape(T * K, D)  # backward: a sum over K
    y_ND = run_sorted(permuted(copies_ND, order_N, inverse_N), counts)
    y_TKD = (permuted(y_ND, inverse_N, order_N) * w_TK.reshape(-1, 1)).view(T, K, D)
    y_TD = y_TKD[:, 0]
    for k in range(1, K):
        y_TD = y_TD + y_TKD[:, k]
    return y_TD


def sorted_swiglu(
    x_TD: torch.Tensor, idx_TK: torch.Tensor, w_TK: torch.Tensor, w_gate_up_EFD: torch.Tensor, w_down_EDF: torch.Tensor
) -> torch.Tensor:
    """Sum over chosen experts of w * SwiGLU_e(x): `routed_sum` with `grouped_swiglu` on this rank."""
    return routed_sum(
        x_TD, idx_TK, w_TK, w_down_EDF.shape[0], lambda rows_ND, counts: grouped_swiglu(rows_ND, counts, w_gate_up_EFD, w_down_EDF)
    )


class Router(nn.Module):
    """Linear scores over experts; parameter `weight` [E, D] is HF's `mlp.gate.weight`."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(config.num_experts, config.hidden_size))

    def forward(self, x_TD: torch.Tensor) -> torch.Tensor:
        return F.linear(x_TD, self.weight)


class Experts(nn.Module):
    """Routed expert weights, fused: gate_up_proj [E, 2F, D], down_proj [E, D, F]."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        E, F_, D = config.num_experts, config.moe_intermediate_size, config.hidden_size
        self.gate_up_proj = nn.Parameter(torch.empty(E, 2 * F_, D))
        self.down_proj = nn.Parameter(torch.empty(E, D, F_))


class SwiGLU(nn.Module):
    """Dense SwiGLU MLP (dense layers and the shared expert): gate_proj, up_proj, down_proj."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x_TD: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x_TD)) * self.up_proj(x_TD))


class MoeBlock(nn.Module):
    """Routed experts plus, when configured, a shared expert scaled by sigmoid(shared_expert_gate x)."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.num_experts, self.top_k, self.norm_topk_prob = config.num_experts, config.num_experts_per_tok, config.norm_topk_prob
        self.gate = Router(config)
        self.experts = Experts(config)
        if config.shared_expert_intermediate_size:
            # Qwen2-MoE / Qwen3.5-MoE: one dense expert every token uses, gated per token.
            self.shared_expert = SwiGLU(config.hidden_size, config.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(config.hidden_size, 1, bias=False)
        else:
            self.shared_expert = None
            self.shared_expert_gate = None
        # Set by expert_parallel.shard_experts: (x_TD, idx_TK, w_TK) -> y_TD with the experts
        # sharded over ranks. None runs every expert here.
        self.expert_exchange: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
        self._derived = DerivedWeights()

    def slotted_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(gate_up [E, 2F, D], down [E, D, F]) for `slotted_swiglu`'s two batched GEMMs.

        Those GEMMs multiply by each weight transposed. torch's CPU bmm runs ~1.7x faster when
        that transposed operand is contiguous (2-core VM, torch 2.15, a 32-sequence decode step
        of the tiny model: 77 -> 46 us and 42 -> 24 us per call), so on CPU under inference
        mode (the engine's decode) these are same-valued copies stored transposed, kept
        until a weight changes (derived.py). Training and other devices get the parameters.
        """
        gate_up, down = self.experts.gate_up_proj, self.experts.down_proj
        if gate_up.device.type != "cpu" or not torch.is_inference_mode_enabled():
            return gate_up, down
        return (
            self._derived.get("gate_up", (gate_up,), lambda: gate_up.detach().transpose(1, 2).contiguous().transpose(1, 2)),
            self._derived.get("down", (down,), lambda: down.detach().transpose(1, 2).contiguous().transpose(1, 2)),
        )

    def forward(self, x_TD: torch.Tensor, replay_TK: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(y_TD, idx_TK): output and the experts each token used (chosen or replayed)."""
        idx_TK, w_TK = route(self.gate(x_TD), self.top_k, self.norm_topk_prob, replay_TK)
        gate_up, down = self.experts.gate_up_proj, self.experts.down_proj
        if self.expert_exchange is not None:
            y_TD = self.expert_exchange(x_TD, idx_TK, w_TK)
        elif prefers_all_experts(x_TD.shape[0], self.num_experts, self.top_k, down.shape[2], down.shape[1]):
            y_TD = all_experts_swiglu(x_TD, idx_TK, w_TK, gate_up, down)
        else:
            slotted_TD = slotted_swiglu(x_TD, idx_TK, w_TK, *self.slotted_weights())
            if slotted_TD is not None:
                y_TD = slotted_TD
            else:
                y_TD = sorted_swiglu(x_TD, idx_TK, w_TK, gate_up, down)
        if self.shared_expert is not None:
            y_TD = y_TD + torch.sigmoid(self.shared_expert_gate(x_TD)) * self.shared_expert(x_TD)
        return y_TD, idx_TK
