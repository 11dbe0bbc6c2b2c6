"""Qwen3-MoE-compatible policy model with routing record and replay (see docs/model.md)."""

from .attention import KVCache, KVPool, PackedBatch
from .checkpoint import CheckpointError, load_model, read_config, save_model
from .config import Config, ConfigError
from .moe import RoutingShapeError, grouped_swiglu, route
from .transformer import ROUTING_DTYPE, ModelOutput, MoeForCausalLM, init_weights

__all__ = [
    "ROUTING_DTYPE",
    "CheckpointError",
    "Config",
    "ConfigError",
    "KVCache",
    "KVPool",
    "ModelOutput",
    "MoeForCausalLM",
    "PackedBatch",
    "RoutingShapeError",
    "grouped_swiglu",
    "init_weights",
    "load_model",
    "read_config",
    "route",
    "save_model",
]
