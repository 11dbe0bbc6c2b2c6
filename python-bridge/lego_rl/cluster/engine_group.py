"""Embedded-engine replicas as Ray actors that the trainer publishes versioned weights to."""

from __future__ import annotations

from typing import Any

import ray
import torch

from ..engine import Engine, EngineConfig, GenerationRequest, GenerationResult


@ray.remote
class EngineReplica:
    """One embedded engine; `generate` runs a batch of requests with continuous batching."""

    def __init__(self, model_dir: str, config: EngineConfig, threads: int = 1) -> None:
        torch.set_num_threads(threads)
        self.engine = Engine.from_model_dir(model_dir, config)

    def generate(self, requests: list[GenerationRequest]) -> dict[str, GenerationResult]:
        return self.engine.generate(requests)

    def update_weights(self, version: int, weights: dict[str, torch.Tensor]) -> int:
        self.engine.update_weights(weights, version)
        return version


def start_engines(model_dir: str, config: EngineConfig, *, replicas: int = 1, cpus: float = 1) -> list[Any]:
    return [EngineReplica.options(num_cpus=cpus).remote(model_dir, config) for _ in range(replicas)]
