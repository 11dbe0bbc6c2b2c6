"""The toy rollout task: a reward that is a simple function of the output, sampled by the
embedded engine; no harness, no sandbox, every other part of the loop real. For the learning
tests, the trainer benchmark, the Ray toy run (`--toy-steps`) and the demo.
"""

from .task import ToyTask, rollout_batch, routing_shape_of, toy_batch, toy_requests

__all__ = ["ToyTask", "rollout_batch", "routing_shape_of", "toy_batch", "toy_requests"]
