"""An on-policy batch source: engine replicas (Ray actors) sample the toy task each step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import ray

from ..schema import RoutingShape, decode_batch
from ..trainer import TrainingBatch
from ..toy import ToyTask, toy_batch, toy_requests


@dataclass(kw_only=True, slots=True)
class ToyRolloutSource:
    """Yields `steps` batches; each is sampled with the weights the trainer last published."""

    engines: list[Any]
    task: ToyTask
    shape: RoutingShape
    steps: int
    rewards: list[float]
    """Mean reward of each step's rollouts, appended as they are sampled."""

    def __iter__(self) -> Iterator[TrainingBatch]:
        for step in range(self.steps):
            requests = toy_requests(self.task, step)
            shards = [requests[i :: len(self.engines)] for i in range(len(self.engines))]
            results: dict[str, Any] = {}
            for part in ray.get([e.generate.remote(s) for e, s in zip(self.engines, shards) if s]):
                results.update(part)
            data, mean_reward = toy_batch(self.task, results, step, self.shape)
            self.rewards.append(mean_reward)
            yield TrainingBatch(batch_id=f"toy-{step:06d}", load=lambda d=data: decode_batch(d), done=lambda: None)
