"""Group-relative advantages: A_i = (r_i - mean r) / std r within each group of G rollouts.

Simplifications, each counted so the monitor sees them:
1. `env_error` rollouts (and any without a reward) are excluded before grouping:
   an environment failure says nothing about the policy, so it must not become
   a zero reward. So are the rollout worker's over-length drops (records with
   no segments), the ones it shipped `stale` (over its --max-staleness bound),
   and, with a trainer bound, those sampled too far behind the trainer's weights:
   the rest of a group keeps a baseline of its own (docs/rollout.md).
2. A group whose remaining rewards are all equal carries no learning signal
   (every advantage is 0); it is skipped, not trained as zeros.
3. A group left with a single rollout has no baseline; it is skipped too.
std is the population standard deviation over the group (GSPO paper, eq. 6).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutOutcome:
    """What advantage computation needs to know about one trajectory."""

    trajectory_id: str
    group_id: str
    status: str
    reward: float | None
    policy_version: int | None = None
    """Oldest weight version that sampled one of its tokens; None when unknown (no turns)."""
    stale_at_ship: bool = False
    """The worker shipped it over its --max-staleness bound (the record's `stale`)."""
    dropped_over_length: bool = False
    """The worker's over-length policy dropped it: the record carries no segments (`over_length.action`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupAdvantages:
    """Advantages of the trajectories that train, and counts of what was left out."""

    trajectory_ids: list[str]
    advantages: npt.NDArray[np.float32]
    """[N] one advantage per entry of `trajectory_ids`."""
    groups_trained: int
    groups_skipped_identical: int
    groups_skipped_singleton: int
    excluded: dict[str, int] = field(default_factory=dict)
    """Trajectories left out before grouping, by reason (env_error, over_length, stale_at_ship, stale, no_reward)."""

    def metrics(self) -> dict[str, float]:
        return {
            "batch/groups_trained": float(self.groups_trained),
            "batch/groups_skipped_identical": float(self.groups_skipped_identical),
            "batch/groups_skipped_singleton": float(self.groups_skipped_singleton),
            **{f"batch/excluded_{reason}": float(n) for reason, n in self.excluded.items()},
        }


def exclusion_reason(outcome: RolloutOutcome, *, min_policy_version: int | None = None) -> str | None:
    """Why `outcome` is left out before grouping (a `batch/excluded_*` key), None when it may train.

    `min_policy_version` is the trainer's own staleness bound: rollouts sampled (even in part)
    by older weights are left out.
    """
    if outcome.status == "env_error":
        return "env_error"
    if outcome.dropped_over_length:
        return "over_length"
    if outcome.stale_at_ship:
        # The worker judged it over the run's bound as it shipped; this trainer keeps no older
        # weights to correct it with (docs/rollout.md, "Stale trajectories at the trainer").
        return "stale_at_ship"
    if min_policy_version is not None and outcome.policy_version is not None and outcome.policy_version < min_policy_version:
        # Beyond the staleness bound: its importance ratios would be clipped away or,
        # worse, dominate; the rest of its group keeps a baseline of its own.
        return "stale"
    if outcome.reward is None or not np.isfinite(outcome.reward):
        return "no_reward"
    return None


def group_advantages(
    outcomes: Sequence[RolloutOutcome], *, eps: float = 1e-6, min_policy_version: int | None = None
) -> GroupAdvantages:
    """Advantages per group of the outcomes `exclusion_reason` lets train; the others are counted by reason."""
    excluded: dict[str, int] = defaultdict(int)
    groups: dict[str, list[RolloutOutcome]] = defaultdict(list)
    for outcome in outcomes:
        reason = exclusion_reason(outcome, min_policy_version=min_policy_version)
        if reason is not None:
            excluded[reason] += 1
        else:
            groups[outcome.group_id].append(outcome)
    ids: list[str] = []
    values: list[float] = []
    trained = identical = singleton = 0
    for members in groups.values():
        rewards = np.array([m.reward for m in members], dtype=np.float64)
        if len(members) < 2:
            singleton += 1
            continue
        std = rewards.std()
        if std < eps:
            identical += 1
            continue
        trained += 1
        ids += [m.trajectory_id for m in members]
        values += list((rewards - rewards.mean()) / (std + eps))
    return GroupAdvantages(
        trajectory_ids=ids,
        advantages=np.array(values, dtype=np.float32),
        groups_trained=trained,
        groups_skipped_identical=identical,
        groups_skipped_singleton=singleton,
        excluded=dict(excluded),
    )
