"""The training loop, as the algorithm reads: batch -> advantages -> update -> checkpoint -> publish.

Exactly-once: the ids of trained batches are part of every checkpoint; after a
resume, a batch whose id is already there is skipped, and a batch is released
by its source only after the checkpoint that contains its update is durable.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TextIO

from typing import Protocol

from ..schema import Trajectory
from .advantages import RolloutOutcome, group_advantages
from .checkpoint import CheckpointStore, TrainerPosition
from .advantages import GroupAdvantages
from .packing import pack_step, trajectories_of
from .sources import BatchSource
from .step import PolicyUpdater

if TYPE_CHECKING:  # the publishers live in weights/ (HTTP to inference servers); the loop only calls them
    from ..weights import WeightPublisher


class Policy(Protocol):
    """What the loop needs from the policy, wherever its ranks run (this process or Ray actors)."""

    @property
    def replay_routing(self) -> bool: ...

    def resume(self, store: CheckpointStore) -> TrainerPosition: ...

    def update(self, trajectories: dict[str, Trajectory], advantages: GroupAdvantages) -> dict[str, float]:
        """One GSPO update on the trajectories `advantages` selected."""
        ...

    def save(self, store: CheckpointStore, position: TrainerPosition) -> None: ...

    def publish(self, version: int) -> None:
        """Make the new weights live on the engines, tagged with `version`."""
        ...


@dataclass(kw_only=True, slots=True)
class LocalPolicy:
    """One rank in this process; `on_publish` receives (version, model) for weight sync."""

    updater: PolicyUpdater
    layers: int
    """MoE layers (routing rows per token)."""
    top_k: int
    on_publish: Callable[[int, object], None] | None = None
    publishers: list[WeightPublisher] = field(default_factory=list)
    """Also given (version, model) on every publish, after on_publish: e.g. a DiskWeightPublisher for vLLM/SGLang."""

    @property
    def replay_routing(self) -> bool:
        return self.updater.config.replay_routing

    def resume(self, store: CheckpointStore) -> TrainerPosition:
        latest = store.latest()
        if latest is None:
            return TrainerPosition(step=0, policy_version=0)
        return store.load(latest, self.updater.model, self.updater.optimizer)

    def update(self, trajectories: dict[str, Trajectory], advantages: GroupAdvantages) -> dict[str, float]:
        step = pack_step(trajectories, advantages, layers=self.layers, top_k=self.top_k, replay=self.replay_routing)
        return self.updater.update(step)

    def save(self, store: CheckpointStore, position: TrainerPosition) -> None:
        store.save(self.updater.model, self.updater.optimizer, position)

    def publish(self, version: int) -> None:
        if self.on_publish is not None:
            self.on_publish(version, self.updater.model)
        for publisher in self.publishers:
            publisher.publish(version, self.updater.model)


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopConfig:
    """How the loop runs around the update."""

    checkpoint_dir: Path
    """Where checkpoints (and the resume point) live."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints stay (0: all); one is written after every step."""
    max_steps: int | None = None
    """Stop after this many updates (None: until the source ends)."""
    max_staleness: int | None = None
    """Train only rollouts whose every token was sampled by weights at most this many
    versions behind the trainer's (0 = strictly on-policy); older ones are excluded and
    counted as batch/excluded_stale. None: no bound. Whatever it is, a record the rollout
    worker shipped `stale` is excluded too (batch/excluded_stale_at_ship)."""


def oldest_policy_version(trajectory: Trajectory) -> int | None:
    """The oldest weight version that sampled any of the trajectory's turns (None: no turns).

    The record says it (`min_policy_version`, schema 2.3); a record written before 2.3 is scanned.
    """
    if trajectory.min_policy_version is not None:
        return trajectory.min_policy_version
    versions = [turn.policy_version for segment in trajectory.segments for turn in segment.turns]
    return min(versions) if versions else None


def outcome_of(trajectory: Trajectory) -> RolloutOutcome:
    over_length = trajectory.over_length
    return RolloutOutcome(
        trajectory_id=trajectory.trajectory_id,
        group_id=trajectory.group_id,
        status=trajectory.status,
        reward=trajectory.reward,
        policy_version=oldest_policy_version(trajectory),
        stale_at_ship=bool(trajectory.stale),
        dropped_over_length=over_length is not None and over_length.action == "dropped",
    )


def staleness_metrics(outcomes: list[RolloutOutcome], policy_version: int) -> dict[str, float]:
    """How far behind the trainer's weights the batch's rollouts were sampled (versions)."""
    lags = [policy_version - o.policy_version for o in outcomes if o.policy_version is not None]
    if not lags:
        return {}
    return {"batch/staleness_max": float(max(lags)), "batch/staleness_mean": sum(lags) / len(lags)}


def rollout_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """What the batch's rollouts did: mean reward (graded ones), turns and tool calls per rollout,
    and from schema 2.3 records: tool-call parse failures, tokens, stage times, over-length cuts."""
    if not trajectories:
        return {}
    n = len(trajectories)
    graded = [t.reward for t in trajectories if t.reward is not None]
    out = {"rollout/turns_mean": sum(t.metrics.turns for t in trajectories) / n,
           "rollout/tool_calls_mean": sum(t.metrics.tool_calls for t in trajectories) / n}
    if graded:
        out["rollout/reward_mean"] = sum(graded) / len(graded)
    counted = [t for t in trajectories if t.tool_call_parse_failures is not None]
    if counted:
        failures = sum(t.tool_call_parse_failures or 0 for t in counted)
        calls = sum(t.metrics.tool_calls for t in counted)
        out["rollout/tool_call_parse_failure_rate"] = failures / max(1, failures + calls)
    tokens = [t.tokens for t in trajectories if t.tokens is not None]
    if tokens:
        out["rollout/prompt_tokens_mean"] = sum(c.prompt for c in tokens) / len(tokens)
        out["rollout/completion_tokens_mean"] = sum(c.completion for c in tokens) / len(tokens)
    for stage in ("setup", "agent", "grading"):
        times = [getattr(t.stage_seconds, stage) for t in trajectories if t.stage_seconds is not None]
        if any(v is not None for v in times):
            out[f"rollout/{stage}_s_mean"] = sum(v for v in times if v is not None) / sum(v is not None for v in times)
    truncated = sum(t.over_length is not None and t.over_length.action == "truncated" for t in trajectories)
    if truncated:
        out["rollout/truncated_over_length"] = float(truncated)
    return out


def train(
    source: BatchSource,
    policy: Policy,
    config: LoopConfig,
    *,
    log: TextIO | None = None,
    announce: Callable[[int], None] | None = None,
) -> TrainerPosition:
    """Train on `source` until it ends or `config.max_steps`.

    `announce(version)` runs at start and after every step (once the new version, if any, is
    published), on this thread:
    e.g. `ReceiverSource.announce`, which tells rollout workers the trainer's version.
    """
    store = CheckpointStore(root=config.checkpoint_dir, keep=config.keep_checkpoints)
    position = policy.resume(store)
    if announce is not None:
        announce(position.policy_version)
    trained = set(position.consumed_batch_ids)
    for batch in source:
        if batch.batch_id in trained:
            batch.done()  # redelivered after a crash: its update is already in the weights
            continue
        trajectories = trajectories_of([batch.load()])
        outcomes = [outcome_of(t) for t in trajectories.values()]
        oldest_allowed = None if config.max_staleness is None else position.policy_version - config.max_staleness
        advantages = group_advantages(outcomes, min_policy_version=oldest_allowed)
        started = time.perf_counter()
        metrics = (advantages.metrics() | staleness_metrics(outcomes, position.policy_version)
                   | rollout_metrics(list(trajectories.values())))
        if advantages.trajectory_ids:
            metrics |= policy.update(trajectories, advantages)
            position.policy_version += 1
        position.step += 1
        position.consumed_batch_ids.append(batch.batch_id)
        trained.add(batch.batch_id)
        policy.save(store, position)
        batch.done()
        if advantages.trajectory_ids:
            policy.publish(position.policy_version)
        if announce is not None:
            # After every step, an update or not (then the same version again): a rollout worker
            # running on-policy (`lego rollout --on-policy`) starts its next group only once the
            # step that consumed its last one is done and its weights are on the engines.
            announce(position.policy_version)
        metrics["time/step_s"] = time.perf_counter() - started
        if log is not None:
            log.write(json.dumps({"step": position.step, "batch_id": batch.batch_id,
                                  "policy_version": position.policy_version, **metrics}) + "\n")
            log.flush()
        if config.max_steps is not None and position.step >= config.max_steps:
            break
    return position
