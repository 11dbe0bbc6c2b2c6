"""Expert parallelism: each rank holds E/R experts; token copies travel to their expert and back.

Shape legend as in moe.py (T tokens, D width, E experts, K per token, N token copies),
plus R ranks and L = E/R local experts.

Per MoE layer, on every rank:
1. route locally (router weights are replicated) and sort the T*K copies by expert;
2. exchange per-expert counts, then the copies, with `all_to_all_single` (autograd-aware,
   so gradients flow back through the exchange to the sending rank's activations);
3. regroup the received rows by local expert and run the local experts;
4. send the outputs back the same way, weight them with the gates and sum per token.
gloo (CPU) supports `all_to_all_single` with split sizes; NCCL supports it on GPUs, so
the same code serves tests on CPU and training on GPUs. Replicated parameters (router,
attention, norms, shared expert) need their gradients all-reduced across ranks as in
data parallelism; `allreduce_replicated_grads` does that.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_to_all_single

from torch import nn

from .moe import MoeBlock, grouped_swiglu, permuted, route, routed_sum


class ExpertParallelError(ValueError):
    """The expert count does not divide across ranks, or shards do not match."""


def local_expert_range(num_experts: int, rank: int, world: int) -> range:
    if num_experts % world:
        raise ExpertParallelError(f"{num_experts} experts do not divide evenly over {world} expert-parallel ranks")
    per_rank = num_experts // world
    return range(rank * per_rank, (rank + 1) * per_rank)


def expert_parallel_moe(
    x_TD: torch.Tensor,
    idx_TK: torch.Tensor,
    w_TK: torch.Tensor,
    w_gate_up_LFD: torch.Tensor,
    w_down_LDF: torch.Tensor,
    num_experts: int,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """Routed-expert output y_TD for this rank's tokens, with experts sharded over `group`."""
    world = dist.get_world_size(group)
    local = num_experts // world
    if w_gate_up_LFD.shape[0] != local or num_experts % world:
        raise ExpertParallelError(
            f"rank holds {w_gate_up_LFD.shape[0]} experts; {num_experts} experts over {world} ranks needs {local} each"
        )

    def exchange_and_run(x_ND: torch.Tensor, counts_E: list[int]) -> torch.Tensor:
        # Counts travel on the activations' device: NCCL exchanges only CUDA tensors.
        send_counts_RL = torch.tensor(counts_E, dtype=torch.int64, device=x_ND.device).reshape(world, local)
        recv_counts_RL = torch.empty_like(send_counts_RL)
        dist.all_to_all_single(recv_counts_RL, send_counts_RL, group=group)
        send_splits = send_counts_RL.sum(dim=1).tolist()
        recv_splits = recv_counts_RL.sum(dim=1).tolist()
        x_recv_MD = all_to_all_single(x_ND.new_empty(sum(recv_splits), x_ND.shape[1]), x_ND, recv_splits, send_splits, group=group)
        # Received rows arrive grouped by source rank, then by local expert; regroup by expert.
        expert_of_row_M = torch.repeat_interleave(torch.arange(local, device=x_ND.device).repeat(world), recv_counts_RL.reshape(-1))
        by_expert_M = torch.argsort(expert_of_row_M, stable=True)
        back_M = torch.argsort(by_expert_M)
        y_sorted_MD = grouped_swiglu(permuted(x_recv_MD, by_expert_M, back_M), recv_counts_RL.sum(dim=0).tolist(), w_gate_up_LFD, w_down_LDF)
        y_recv_MD = permuted(y_sorted_MD, back_M, by_expert_M)
        return all_to_all_single(y_recv_MD.new_empty(x_ND.shape), y_recv_MD, send_splits, recv_splits, group=group)

    return routed_sum(x_TD, idx_TK, w_TK, num_experts, exchange_and_run)


def expert_parallel_route_and_moe(
    x_TD: torch.Tensor,
    router_weight_ED: torch.Tensor,
    w_gate_up_LFD: torch.Tensor,
    w_down_LDF: torch.Tensor,
    *,
    top_k: int,
    norm_topk_prob: bool,
    replay_TK: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Route (or replay) and run the sharded experts: (y_TD, idx_TK)."""
    logits_TE = torch.nn.functional.linear(x_TD, router_weight_ED)
    idx_TK, w_TK = route(logits_TE, top_k, norm_topk_prob, replay_TK)
    y_TD = expert_parallel_moe(x_TD, idx_TK, w_TK, w_gate_up_LFD, w_down_LDF, router_weight_ED.shape[0], group)
    return y_TD, idx_TK


def allreduce_replicated_grads(parameters: list[torch.nn.Parameter], group: dist.ProcessGroup | None = None) -> None:
    """Sums gradients of parameters every rank holds a full copy of (the loss is a sum over ranks)."""
    for parameter in parameters:
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM, group=group)


def shard_experts(model: nn.Module, group: dist.ProcessGroup | None = None) -> range:
    """Keeps only this rank's experts in every MoE block and routes their tokens over `group`.

    Returns the global expert ids this rank now holds. Router, attention, norms and the
    shared expert stay replicated; sync their gradients with `allreduce_replicated_grads`.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    held: range | None = None
    for block in model.modules():
        if not isinstance(block, MoeBlock):
            continue
        held = local_expert_range(block.num_experts, rank, world)
        experts = block.experts
        experts.gate_up_proj = nn.Parameter(experts.gate_up_proj.data[held.start : held.stop].clone())
        experts.down_proj = nn.Parameter(experts.down_proj.data[held.start : held.stop].clone())
        block.expert_exchange = _exchange(block.num_experts, experts, group)
    if held is None:
        raise ExpertParallelError("the model has no MoE block to shard")
    return held


def _exchange(num_experts: int, experts: nn.Module, group: dist.ProcessGroup | None):  # type: ignore[no-untyped-def]
    def run(x_TD: torch.Tensor, idx_TK: torch.Tensor, w_TK: torch.Tensor) -> torch.Tensor:
        return expert_parallel_moe(x_TD, idx_TK, w_TK, experts.gate_up_proj, experts.down_proj, num_experts, group)

    return run


def replicated_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Every parameter except the sharded routed experts (deduplicated for tied weights)."""
    sharded = {id(p) for block in model.modules() if isinstance(block, MoeBlock) for p in block.experts.parameters()}
    seen: set[int] = set()
    out = []
    for parameter in model.parameters():
        if id(parameter) not in sharded and id(parameter) not in seen:
            seen.add(id(parameter))
            out.append(parameter)
    return out


def gather_expert_state(model: nn.Module, group: dist.ProcessGroup | None = None) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict, assembled on every rank: for checkpoints and weight sync."""
    world = dist.get_world_size(group)
    state = {}
    for name, tensor in model.state_dict().items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            parts = [torch.empty_like(tensor) for _ in range(world)]
            dist.all_gather(parts, tensor.contiguous(), group=group)
            state[name] = torch.cat(parts)
        else:
            state[name] = tensor
    return state
