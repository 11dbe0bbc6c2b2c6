"""A GRPO group's shared prompt packs once; the step computes what the flat packing computes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lego_rl.engine import Engine, EngineConfig
from lego_rl.model import load_model
from lego_rl.schema import decode_batch
from lego_rl.trainer import group_advantages
from lego_rl.trainer.driver import outcome_of
from lego_rl.trainer.packing import PackedStep, pack_step, trajectories_of
from lego_rl.trainer.step import recompute_logprobs
from lego_rl.toy import ToyTask, rollout_batch


def _steps(model_dir: Path) -> tuple[PackedStep, PackedStep]:
    engine = Engine(load_model(model_dir), EngineConfig(dtype="float32"))
    # Two prompts of different lengths, 4 completions each: two heads, eight tails of mixed lengths.
    task = ToyTask(prompts=(tuple(b"write a"), tuple(b"say it: ")), target_token_ids=frozenset(range(97, 123)),
                   group_size=4, max_tokens=6)
    data, _ = rollout_batch(engine, task, step=0)
    trajectories = trajectories_of([decode_batch(data)])
    advantages = group_advantages([outcome_of(t) for t in trajectories.values()])
    layers, top_k = len(engine.model.config.moe_layers), engine.model.config.num_experts_per_tok
    return (pack_step(trajectories, advantages, layers=layers, top_k=top_k, share_prefixes=False),
            pack_step(trajectories, advantages, layers=layers, top_k=top_k))


def test_each_prompt_is_packed_once_and_every_trainable_token_is_kept(byte_model_dir: Path) -> None:
    flat, shared = _steps(byte_model_dir)
    assert flat.prefix_of is None and shared.prefix_of is not None
    assert shared.prefix_of[:2] == [-1, -1] and sorted(shared.prefix_of[2:]) == [0] * 4 + [1] * 4
    assert shared.seq_lens[:2] == [len(b"write a"), len(b"say it: ")]
    assert shared.num_tokens == flat.num_tokens - 3 * (len(b"write a") + len(b"say it: "))
    # Every trajectory's last sampled token is an input to nothing trained, so neither packs it.
    assert flat.unpacked_tail_tokens == shared.unpacked_tail_tokens == 8
    assert shared.source_tokens == flat.source_tokens == flat.num_tokens + 8
    # The same (trajectory, token, rollout logprob) triples, whatever their order.
    def triples(step: PackedStep) -> list[tuple[int, int, float]]:
        return sorted(zip(step.sequence_R.tolist(), step.targets_R.tolist(), step.rollout_logprobs_R.tolist()))
    assert triples(shared) == triples(flat)


def test_logprobs_and_gradients_equal_the_flat_packing(byte_model_dir: Path) -> None:
    flat, shared = _steps(byte_model_dir)
    model = load_model(byte_model_dir)
    model.train()
    results = []
    for step in (flat, shared):
        model.zero_grad(set_to_none=True)
        recomputed = recompute_logprobs(model, step, replay=True)
        # Order-free per-token values: key each logprob by (trajectory, position among its targets).
        order = torch.argsort(step.sequence_R * 10_000 + step.logit_rows_R.argsort().argsort(), stable=True)
        weights = torch.linspace(-1.0, 1.0, steps=step.targets_R.numel())
        per_token = recomputed.logprobs_R[order]
        (per_token * weights).sum().backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results.append((per_token.detach(), grads))
    (flat_lp, flat_grads), (shared_lp, shared_grads) = results
    torch.testing.assert_close(shared_lp, flat_lp, rtol=0, atol=1e-5)
    assert flat_grads.keys() == shared_grads.keys()
    for name in flat_grads:
        # The two packings sum the same float32 terms in other orders; a tensor's rounding error
        # grows with its largest entries (the embedding's reach ~5 here, and AVX-512 kernels
        # reorder its index_add: one of 33k entries then differed by 3.3e-6), so the absolute
        # slack scales with them.
        scale = max(1.0, flat_grads[name].abs().max().item())
        torch.testing.assert_close(shared_grads[name], flat_grads[name], rtol=1e-4, atol=1e-6 * scale, msg=name)


def test_a_tail_layout_the_model_cannot_honour_is_refused_with_the_reason(byte_model_dir: Path) -> None:
    model = load_model(byte_model_dir)
    ids = torch.arange(10)
    with pytest.raises(ValueError, match="must come after every other one"):
        model(ids, seq_lens=[3, 4, 3], prefix_of=[-1, 0, -1])  # a tail before a plain sequence
    with pytest.raises(ValueError, match="must come after every other one"):
        model(ids, seq_lens=[3, 4, 3], prefix_of=[-1, 0, 1])  # a tail continuing a tail
    with pytest.raises(ValueError, match="names 2 sequences"):
        model(ids, seq_lens=[3, 4, 3], prefix_of=[-1, 0])
