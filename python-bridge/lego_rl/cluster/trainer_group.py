"""Trainer ranks as Ray actors, placed together by a placement group.

`TrainerGroup.async_*` methods return object refs; `RayPolicy` adapts the group to
the loop's `Policy` protocol. With one rank every expert lives in it. With R ranks
the experts are sharded R ways (lego_rl.model.expert_parallel over torch.distributed:
gloo on CPU, NCCL on GPU) and each rank trains on its share of the step's
trajectories. Checkpoints: one rank writes to the root; R ranks each write their
shard under rank-<r>/ and the driver moves the root LATEST only after all of them
have, so a resume always finds a step every rank completed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
import torch
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..schema import Trajectory
from ..trainer import (ClusterConfig, CheckpointError, CheckpointStore, GroupAdvantages, PolicyUpdater, StepConfig, TrainerPosition,
                       pack_step, split_for_ranks, trainer_bundles)
from ..weights import WeightPublisher


@ray.remote
class TrainerRank:
    """One trainer rank: its model (whole, or with its expert shard) and optimizer."""

    def __init__(self, model_dir: str, config: StepConfig, threads: int, rank: int, world: int, cuda: bool = False) -> None:
        from ..model import load_model

        torch.set_num_threads(threads)
        self.rank, self.world = rank, world
        # Ray sets CUDA_VISIBLE_DEVICES to this bundle's GPU, so "cuda" is that GPU.
        self.model = load_model(model_dir, device="cuda" if cuda else "cpu")
        self.config = config
        self.updater: PolicyUpdater | None = None if world > 1 else PolicyUpdater(self.model, config)

    def rendezvous_address(self) -> tuple[str, int]:
        import socket

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def join(self, address: str, port: int, backend: str) -> None:
        import torch.distributed as dist

        from ..model import shard_experts

        dist.init_process_group(backend, init_method=f"tcp://{address}:{port}", rank=self.rank, world_size=self.world)
        shard_experts(self.model)
        self.updater = PolicyUpdater(self.model, self.config, expert_group=dist.group.WORLD)

    def _store(self, root: str) -> CheckpointStore:
        return CheckpointStore(root=Path(root) if self.world == 1 else Path(root) / f"rank-{self.rank}")

    def resume(self, root: str) -> TrainerPosition:
        assert self.updater is not None
        name = CheckpointStore(root=Path(root)).latest_name()
        if name is None:
            return TrainerPosition(step=0, policy_version=0)
        path = self._store(root).root / name
        if not (path / "trainer.json").exists():
            raise CheckpointError(f"rank {self.rank} has no {name} under {path.parent}")
        return self._store(root).load(path, self.model, self.updater.optimizer)

    def update(self, trajectories: dict[str, Trajectory], share: GroupAdvantages, loss_scale: float,
               layers: int, top_k: int) -> dict[str, float]:
        assert self.updater is not None
        step = pack_step(trajectories, share, layers=layers, top_k=top_k, replay=self.config.replay_routing,
                         loss_scale=loss_scale)
        return self.updater.update(step)

    def save(self, root: str, position: TrainerPosition, keep: int) -> str:
        assert self.updater is not None
        # A lone rank moves LATEST (and prunes) on its own node's disk, where it resumes from; with several,
        # the coordinator does both once every rank saved (their checkpoint folder is shared).
        store = CheckpointStore(root=self._store(root).root, keep=keep)
        path = store.save(self.model, self.updater.optimizer, position, point_latest=self.world == 1)
        return path.name

    def weights(self) -> dict[str, torch.Tensor]:
        """The full state dict (experts gathered from every rank: call on all ranks together)."""
        if self.world == 1:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        from ..model import gather_expert_state

        return {k: v.detach().clone() for k, v in gather_expert_state(self.model).items()}


@dataclass(kw_only=True, slots=True)
class TrainerGroup:
    """R trainer ranks in one placement group, one bundle each (lego_rl.trainer.plan.trainer_bundles:
    `cpus_per_rank` CPUs and `gpus_per_rank` GPUs; `lego check --config` fits the same bundles)."""

    ranks: list[Any]
    group: PlacementGroup

    @staticmethod
    def create(model_dir: Path, config: StepConfig, *, num_ranks: int = 1, cpus_per_rank: int = 1, gpus_per_rank: int = 0,
               backend: str = "gloo") -> TrainerGroup:
        bundles = trainer_bundles(ClusterConfig(trainer_ranks=num_ranks, cpus_per_rank=cpus_per_rank, gpus_per_rank=gpus_per_rank))
        group = placement_group(bundles, strategy="PACK")
        try:
            ray.get(group.ready(), timeout=120)
        except ray.exceptions.GetTimeoutError as error:
            remove_placement_group(group)
            raise RuntimeError(
                f"Ray could not place {num_ranks} trainer rank(s) of {bundles[0]} within 120 s; the cluster has "
                f"{ray.available_resources().get('CPU', 0)} CPU, {ray.available_resources().get('GPU', 0)} GPU free"
            ) from error
        ranks = [
            TrainerRank.options(
                num_cpus=cpus_per_rank,
                num_gpus=gpus_per_rank,
                scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=i),
            ).remote(str(model_dir), config, cpus_per_rank, i, num_ranks, gpus_per_rank > 0)
            for i in range(num_ranks)
        ]
        if num_ranks > 1:
            address, port = ray.get(ranks[0].rendezvous_address.remote())
            ray.get([rank.join.remote(address, port, backend) for rank in ranks])
        return TrainerGroup(ranks=ranks, group=group)

    @property
    def world(self) -> int:
        return len(self.ranks)

    def async_resume(self, root: Path) -> list[Any]:
        return [rank.resume.remote(str(root)) for rank in self.ranks]

    def async_update(self, trajectories: dict[str, Trajectory], advantages: GroupAdvantages, layers: int,
                     top_k: int) -> list[Any]:
        shares = split_for_ranks(advantages, self.world)
        total = len(advantages.trajectory_ids)
        shared = ray.put(trajectories)
        return [
            rank.update.remote(shared, share, len(share.trajectory_ids) / total, layers, top_k)
            for rank, share in zip(self.ranks, shares)
        ]

    def async_save(self, root: Path, position: TrainerPosition, keep: int) -> list[Any]:
        return [rank.save.remote(str(root), position, keep) for rank in self.ranks]

    def async_weights(self) -> Any:
        refs = [rank.weights.remote() for rank in self.ranks]  # all ranks join the gather
        return refs[0]

    def shutdown(self) -> None:
        for rank in self.ranks:
            ray.kill(rank)
        remove_placement_group(self.group)


@dataclass(kw_only=True, slots=True)
class RayPolicy:
    """The loop's Policy protocol over a TrainerGroup and the engines that receive its weights."""

    trainers: TrainerGroup
    config: StepConfig
    layers: int
    top_k: int
    engines: list[Any] = field(default_factory=list)
    """Engine replica actors exposing `update_weights(version, weights)`."""
    publishers: list[WeightPublisher] = field(default_factory=list)
    """Given (version, full state dict) after the engines: external vLLM/SGLang servers via a DiskWeightPublisher."""

    @property
    def replay_routing(self) -> bool:
        return self.config.replay_routing

    def resume(self, store: CheckpointStore) -> TrainerPosition:
        positions = ray.get(self.trainers.async_resume(store.root))
        return positions[0]

    def update(self, trajectories: dict[str, Trajectory], advantages: GroupAdvantages) -> dict[str, float]:
        per_rank = ray.get(self.trainers.async_update(trajectories, advantages, self.layers, self.top_k))
        metrics = dict(per_rank[0])
        if len(per_rank) > 1:
            metrics["loss/total"] = sum(m["loss/total"] * m["batch/trajectories"] for m in per_rank) / len(advantages.trajectory_ids)
            metrics["batch/trajectories"] = float(len(advantages.trajectory_ids))
            metrics["parallel/expert_ranks"] = float(len(per_rank))
        return metrics

    def save(self, store: CheckpointStore, position: TrainerPosition) -> None:
        names = ray.get(self.trainers.async_save(store.root, position, store.keep))
        if self.trainers.world > 1:
            store.point_latest(names[0])

    def publish(self, version: int) -> None:
        weights = self.trainers.async_weights()
        if self.engines:
            ray.get([engine.update_weights.remote(version, weights) for engine in self.engines])
        if not self.publishers:
            ray.wait([weights])  # the expert gather must finish on every rank; no need to copy the state here
            return
        state = ray.get(weights)
        for publisher in self.publishers:
            publisher.publish(version, state)
