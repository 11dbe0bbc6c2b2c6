"""A toy task whose reward is a simple function of the output, sampled by the embedded engine.

It exists for the learning test, the trainer benchmark and the demo: no harness
and no sandbox, but every other part of the loop is the real one. The engine
samples G completions per prompt (recording logprobs and routing), the rollouts
become schema Trajectories, travel as Arrow bytes, and the trainer learns from
what it decodes.

Reward: the fraction of completion tokens that belong to `target_token_ids`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..engine import Engine, GenerationRequest, GenerationResult, SamplingParams
from ..schema import RoutingShape, Segment, TokenProvenance, Trajectory, TrajectoryMetrics, TurnSpan, encode_batch


@dataclass(frozen=True, kw_only=True, slots=True)
class ToyTask:
    """Prompts, group size and the rewarded tokens."""

    prompts: tuple[tuple[int, ...], ...]
    """Prompt token ids; each is one task group."""
    target_token_ids: frozenset[int]
    """Completion tokens that earn reward."""
    group_size: int = 8
    """Rollouts per prompt (G)."""
    max_tokens: int = 16
    """Completion length cap."""
    temperature: float = 1.0

    def reward(self, completion: list[int]) -> float:
        if not completion:
            return 0.0
        return sum(t in self.target_token_ids for t in completion) / len(completion)


def _trajectory(task: ToyTask, result: GenerationResult, group: int, index: int, step: int) -> Trajectory:
    prompt = np.asarray(result.prompt_token_ids, dtype=np.int32)
    completion = np.asarray(result.completion_token_ids, dtype=np.int32)
    tokens = np.concatenate([prompt, completion])
    sampled = np.concatenate([np.zeros(prompt.size, np.uint8), np.ones(completion.size, np.uint8)])
    logprobs = np.concatenate([np.zeros(prompt.size, np.float32), result.logprobs.numpy().astype(np.float32)])
    routing_rows = torch.cat([result.prompt_routing, result.completion_routing]).numpy()
    recorded = np.ones(tokens.size, np.uint8)
    if routing_rows.shape[0] < tokens.size:  # an aborted request lacks the last rows
        recorded[routing_rows.shape[0]:] = 0
        pad = np.zeros((tokens.size - routing_rows.shape[0], *routing_rows.shape[1:]), routing_rows.dtype)
        routing_rows = np.concatenate([routing_rows, pad])
    segment = Segment(
        segment_id=f"toy-s{step}-g{group}-r{index}-0",
        thread="main",
        thread_id="main",
        seal_reason="finished",
        token_ids=tokens,
        logprobs=logprobs,
        loss_mask=sampled,
        provenance=np.where(sampled == 1, TokenProvenance.SAMPLED, TokenProvenance.PROMPT).astype(np.uint8),
        routing=routing_rows.astype(np.uint8).reshape(-1),
        routing_recorded=recorded,
        turns=[TurnSpan(turn_id=result.request_id, completion_start=int(prompt.size), completion_end=int(tokens.size),
                        policy_version=result.policy_version, finish_reason=result.finish_reason)],
    )
    return Trajectory(
        trajectory_id=f"toy-s{step}-g{group}-r{index}",
        group_id=f"toy-s{step}-g{group}",
        task_id=f"toy/prompt-{group}",
        harness="toy",
        status="ok",
        reward=task.reward(result.completion_token_ids),
        attempt=0,
        defense_flags=[],
        error=None,
        metrics=TrajectoryMetrics(turns=1, tool_calls=0, rereads_after_edit=0, side_thread_turns=0,
                                  rolled_back_turns=0, wall_time_s=0.0),
        segments=[segment],
    )


def toy_requests(task: ToyTask, step: int, *, seed: int = 0) -> list[GenerationRequest]:
    """The step's G requests per prompt, seeded so a step's rollouts are reproducible."""
    return [
        GenerationRequest(
            request_id=f"s{step}-g{g}-r{i}",
            prompt_token_ids=prompt,
            sampling=SamplingParams(temperature=task.temperature, max_tokens=task.max_tokens,
                                    seed=seed * 1_000_003 + step * 10_007 + g * 101 + i),
        )
        for g, prompt in enumerate(task.prompts)
        for i in range(task.group_size)
    ]


def toy_batch(task: ToyTask, results: dict[str, GenerationResult], step: int, shape: RoutingShape) -> tuple[bytes, float]:
    """(Arrow IPC bytes of the step's Trajectory batch, mean reward) from the engine's results."""
    if shape.num_experts > 256:
        raise ValueError("the toy task stores routing as uint8; use a model with at most 256 experts")
    rows = [
        _trajectory(task, results[f"s{step}-g{g}-r{i}"], g, i, step)
        for g in range(len(task.prompts))
        for i in range(task.group_size)
    ]
    mean_reward = float(np.mean([r.reward for r in rows]))
    return encode_batch("Trajectory", rows, shape).to_pybytes(), mean_reward


def routing_shape_of(config: object) -> RoutingShape:
    return RoutingShape(
        layers=len(config.moe_layers),  # type: ignore[attr-defined]
        top_k=config.num_experts_per_tok,  # type: ignore[attr-defined]
        num_experts=config.num_experts,  # type: ignore[attr-defined]
    )


def rollout_batch(engine: Engine, task: ToyTask, step: int, *, seed: int = 0) -> tuple[bytes, float]:
    """Samples one step's groups with an in-process engine."""
    results = engine.generate(toy_requests(task, step, seed=seed))
    return toy_batch(task, results, step, routing_shape_of(engine.model.config))
