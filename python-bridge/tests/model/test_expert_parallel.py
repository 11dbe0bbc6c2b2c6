"""EP = 2 on two CPU processes (gloo) gives the same loss and gradients as EP = 1."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lego_rl.model.expert_parallel import (
    ExpertParallelError,
    allreduce_replicated_grads,
    expert_parallel_route_and_moe,
    local_expert_range,
)
from lego_rl.model.moe import dispatch, grouped_swiglu, route

T, D, E, F, K = 24, 16, 8, 12, 2


def _weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return {
        "x": torch.randn(T, D, generator=g, dtype=torch.float64),
        "router": torch.randn(E, D, generator=g, dtype=torch.float64) * 0.5,
        "gate_up": torch.randn(E, 2 * F, D, generator=g, dtype=torch.float64) * 0.2,
        "down": torch.randn(E, D, F, generator=g, dtype=torch.float64) * 0.2,
        "probe": torch.randn(T, D, generator=g, dtype=torch.float64),
    }


def _reference() -> dict[str, torch.Tensor]:
    w = {k: v.clone().requires_grad_(k != "probe") for k, v in _weights().items()}
    idx, gates = route(torch.nn.functional.linear(w["x"], w["router"]), K, True)
    order, token, counts = dispatch(idx, E)
    y = grouped_swiglu(w["x"][token], counts, w["gate_up"], w["down"]) * gates.reshape(-1)[order, None]
    y_TD = torch.zeros_like(w["x"]).index_add(0, token, y)
    loss = (y_TD * w["probe"]).sum()
    loss.backward()
    return {"loss": loss.detach(), **{f"grad_{k}": w[k].grad for k in ("x", "router", "gate_up", "down")}}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    full = _weights()
    tokens = slice(rank * T // world, (rank + 1) * T // world)
    experts = local_expert_range(E, rank, world)
    x = full["x"][tokens].clone().requires_grad_()
    router = torch.nn.Parameter(full["router"].clone())
    gate_up = full["gate_up"][experts.start : experts.stop].clone().requires_grad_()
    down = full["down"][experts.start : experts.stop].clone().requires_grad_()
    y, _ = expert_parallel_route_and_moe(x, router, gate_up, down, top_k=K, norm_topk_prob=True)
    loss = (y * full["probe"][tokens]).sum()
    loss.backward()
    allreduce_replicated_grads([router])
    torch.save({"loss": loss.detach(), "grad_x": x.grad, "grad_router": router.grad,
                "grad_gate_up": gate_up.grad, "grad_down": down.grad}, Path(out) / f"rank{rank}.pt")
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_expert_parallel_ranks_match_one_rank_in_loss_and_gradients(tmp_path: Path) -> None:
    mp.start_processes(_rank, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    reference = _reference()
    assert torch.allclose(ranks[0]["loss"] + ranks[1]["loss"], reference["loss"], atol=1e-5)
    assert torch.allclose(torch.cat([r["grad_x"] for r in ranks]), reference["grad_x"], atol=1e-5)
    assert torch.allclose(torch.cat([r["grad_gate_up"] for r in ranks]), reference["grad_gate_up"], atol=1e-5)
    assert torch.allclose(torch.cat([r["grad_down"] for r in ranks]), reference["grad_down"], atol=1e-5)
    for r in ranks:
        assert torch.allclose(r["grad_router"], reference["grad_router"], atol=1e-5)


def test_experts_that_do_not_divide_over_the_ranks_are_refused() -> None:
    with pytest.raises(ExpertParallelError, match="8 experts do not divide evenly over 3"):
        local_expert_range(8, 0, 3)


# ---- the whole model: EP = 2 ranks (each with half the sequences and half the experts) vs EP = 1

SEQUENCES = [[5, 17, 42, 99, 3, 250, 7], [64, 65, 66, 67], [1, 2, 3, 4, 5, 6, 7, 8, 9], [200, 100, 50]]


def _model_loss(model: torch.nn.Module, sequences: list[list[int]]) -> torch.Tensor:
    ids = torch.tensor([t for s in sequences for t in s])
    logits = model(ids, seq_lens=[len(s) for s in sequences]).logits
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    rows, targets, at = [], [], 0
    for s in sequences:
        rows += list(range(at, at + len(s) - 1))
        targets += s[1:]
        at += len(s)
    return logprobs[rows, targets].sum()


def _model_rank(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    from lego_rl.model import load_model
    from lego_rl.model.expert_parallel import gather_expert_state, replicated_parameters, shard_experts

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = load_model(model_dir)
    shard_experts(model)
    loss = _model_loss(model, SEQUENCES[rank::world])
    loss.backward()
    allreduce_replicated_grads(replicated_parameters(model))
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    full = gather_expert_state(model)
    torch.save({"loss": loss.detach(), "grads": grads, "full_state_keys": sorted(full),
                "full_expert_shape": full["model.layers.0.mlp.experts.gate_up_proj"].shape}, Path(out) / f"model{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.slow
def test_the_whole_model_with_experts_on_two_ranks_matches_one_rank(tmp_path: Path) -> None:
    from lego_rl.model import load_model
    from lego_rl.model.tiny import write_tiny_model

    model_dir = write_tiny_model(tmp_path / "tiny", tokenizer="bytes", seed=3)
    reference = load_model(model_dir)
    reference_loss = _model_loss(reference, SEQUENCES)
    reference_loss.backward()
    mp.start_processes(_model_rank, args=(2, _free_port(), str(model_dir), str(tmp_path)), nprocs=2, join=True,
                       start_method="spawn")
    ranks = [torch.load(tmp_path / f"model{r}.pt") for r in range(2)]
    assert torch.allclose(ranks[0]["loss"] + ranks[1]["loss"], reference_loss.detach(), atol=1e-4, rtol=1e-6)
    assert ranks[0]["full_state_keys"] == sorted(reference.state_dict())
    for name, parameter in reference.named_parameters():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            sharded = torch.cat([r["grads"][name] for r in ranks])
            assert ranks[0]["full_expert_shape"] == reference.model.layers[0].mlp.experts.gate_up_proj.shape
        else:
            sharded = ranks[0]["grads"][name]
            assert torch.allclose(ranks[1]["grads"][name], sharded)
        assert torch.allclose(sharded, parameter.grad, atol=1e-5), name
