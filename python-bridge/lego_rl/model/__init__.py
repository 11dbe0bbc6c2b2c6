"""Qwen3-MoE-compatible policy model with routing record and replay (see docs/model.md)."""

from typing import Any

from .attention import KVCache, KVPool, PackedBatch
from .checkpoint import (CheckpointError, ExpertLayout, load_model, load_state, read_config, safetensors_files, save_model,
                         split_experts)
from .config import Config, ConfigError
from .expert_parallel import allreduce_replicated_grads, gather_expert_state, replicated_parameters, shard_experts
from .moe import MoeBlock, RoutingShapeError, grouped_swiglu, route
from .transformer import ROUTING_DTYPE, ModelOutput, MoeForCausalLM, init_weights

__all__ = [
    "CheckpointError",
    "Config",
    "ConfigError",
    "ExpertLayout",
    "KVCache",
    "KVPool",
    "ModelOutput",
    "MoeBlock",
    "MoeForCausalLM",
    "PackedBatch",
    "QWEN3_TOKENS",
    "ROUTING_DTYPE",
    "RoutingShapeError",
    "allreduce_replicated_grads",
    "find_qwen3_tokenizer_dir",
    "gather_expert_state",
    "grouped_swiglu",
    "init_weights",
    "load_model",
    "load_state",
    "read_config",
    "replicated_parameters",
    "route",
    "safetensors_files",
    "save_model",
    "shard_experts",
    "split_experts",
    "write_tiny_model",
]

# The tiny-model writer is also `python -m lego_rl.model.tiny`: imported on first use, so that
# running it as a module does not find it already imported by its package (runpy's warning).
_TINY = ("QWEN3_TOKENS", "find_qwen3_tokenizer_dir", "write_tiny_model")


def __getattr__(name: str) -> Any:
    if name in _TINY:
        from . import tiny

        return getattr(tiny, name)
    raise AttributeError(f"module 'lego_rl.model' has no attribute {name!r}")
