"""The GPU path: bf16 on CUDA, the engine on CUDA, expert parallelism over NCCL, R3 fidelity.

Selected with `-m gpu` (scripts/gpu-check runs them on a machine with an NVIDIA
GPU); the default suite deselects them because CI has no GPU.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from lego_rl.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
from lego_rl.model import load_model
from lego_rl.model.expert_parallel import expert_parallel_route_and_moe
from lego_rl.model.tiny import write_tiny_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny"), tokenizer="bytes", seed=0)


def test_bf16_on_cuda_tracks_fp32_on_cuda(model_dir: Path) -> None:
    ids = torch.tensor([list(b"def add(a, b): return a + b")], device="cuda")
    fp32 = load_model(model_dir, device="cuda")
    bf16 = load_model(model_dir, dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        p32 = torch.softmax(fp32(ids).logits.float(), -1)
        p16 = torch.softmax(bf16(ids).logits.float(), -1)
    assert float((p32 - p16).abs().max()) < 1e-2


def test_the_engine_samples_on_cuda_in_bf16_with_routing(model_dir: Path) -> None:
    engine = Engine.from_model_dir(model_dir, EngineConfig(dtype="bfloat16", device="cuda"))
    requests = [GenerationRequest(request_id=f"r{i}", prompt_token_ids=tuple(b"fix: "),
                                  sampling=SamplingParams(max_tokens=16, seed=i)) for i in range(8)]
    results = engine.generate(requests)
    for result in results.values():
        assert len(result.completion_token_ids) == result.logprobs.numel() > 0
        assert result.completion_routing.shape[0] == len(result.completion_token_ids) - 1  # the last is never fed back
        assert torch.isfinite(result.logprobs).all()


def test_the_compiled_decode_step_on_cuda_gives_the_eager_engines_greedy_tokens(model_dir: Path) -> None:
    requests = [GenerationRequest(request_id=f"g{i}", prompt_token_ids=tuple(f"task {i}: ".encode()),
                                  sampling=SamplingParams(temperature=0, max_tokens=12)) for i in range(8)]
    eager = Engine.from_model_dir(model_dir, EngineConfig(device="cuda")).generate(requests)
    engine = Engine.from_model_dir(model_dir, EngineConfig(device="cuda", compile_decode=True))
    compiled = engine.generate(requests)
    assert engine._decode_graph is not None and engine._decode_graph.steps > 0
    for rid, want in eager.items():
        assert compiled[rid].completion_token_ids == want.completion_token_ids
        assert float((compiled[rid].logprobs - want.logprobs).abs().max()) < 1e-3


def test_routing_replay_keeps_cuda_bf16_engine_and_fp32_trainer_correlated(model_dir: Path) -> None:
    from lego_rl.schema import decode_batch
    from lego_rl.trainer.advantages import GroupAdvantages
    from lego_rl.trainer.mismatch import mismatch_metrics
    from lego_rl.trainer.packing import pack_step, trajectories_of
    from lego_rl.toy import ToyTask, rollout_batch

    engine = Engine.from_model_dir(model_dir, EngineConfig(dtype="bfloat16", device="cuda"))
    task = ToyTask(prompts=tuple(tuple(f"task {i}: write".encode()) for i in range(4)),
                   target_token_ids=frozenset(range(97, 123)), group_size=8, max_tokens=32)
    data, _ = rollout_batch(engine, task, step=0)
    trajectories = trajectories_of([decode_batch(data)])
    everyone = GroupAdvantages(trajectory_ids=list(trajectories), advantages=np.zeros(len(trajectories), np.float32),
                               groups_trained=1, groups_skipped_identical=0, groups_skipped_singleton=0)
    trainer = load_model(model_dir, device="cuda").eval()
    config = trainer.config
    step = pack_step(trajectories, everyone, layers=len(config.moe_layers), top_k=config.num_experts_per_tok)
    pearson = {}
    with torch.no_grad():
        for replay in (True, False):
            logits = trainer(step.input_ids_T.cuda(), seq_lens=step.seq_lens,
                             routing_replay=step.routing_TLK.cuda() if replay else None,
                             logits_rows=step.logit_rows_R.cuda()).logits
            logprobs = torch.log_softmax(logits.float(), -1).gather(1, step.targets_R.cuda()[:, None]).squeeze(1).cpu()
            pearson[replay] = mismatch_metrics(step.rollout_logprobs_R, logprobs, torch.ones_like(logprobs))["mismatch/pearson_prob"]
    print(f"CUDA rollout-vs-trainer Pearson(prob): replay {pearson[True]:.6f}, no replay {pearson[False]:.6f}")
    assert pearson[True] >= 0.999 and pearson[True] >= pearson[False]


def test_expert_parallel_exchange_runs_over_nccl() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(64, 32, device="cuda", generator=g, requires_grad=True)
        router = torch.randn(8, 32, device="cuda", generator=g)
        gate_up = torch.randn(8, 48, 32, device="cuda", generator=g, requires_grad=True)
        down = torch.randn(8, 32, 24, device="cuda", generator=g, requires_grad=True)
        y, idx = expert_parallel_route_and_moe(x, router, gate_up, down, top_k=2, norm_topk_prob=True)
        y.sum().backward()
        assert y.shape == x.shape and idx.shape == (64, 2)
        assert x.grad is not None and gate_up.grad is not None and torch.isfinite(gate_up.grad).all()
    finally:
        dist.destroy_process_group()
