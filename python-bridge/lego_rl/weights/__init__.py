"""Policy weights out to inference servers: versioned HF directories on disk, then a load call
to SGLang, vLLM (through the LegoWeightReloader worker extension) or the embedded engine's
ZeroMQ server. No Ray here: publishers run wherever the weights are (docs/weight-sync.md).
"""

from .sync import (
    DiskPublishConfig,
    DiskWeightPublisher,
    EngineServerSyncConfig,
    EngineServerWeightSync,
    SglangSyncConfig,
    SglangWeightSync,
    VllmSyncConfig,
    VllmWeightSync,
    WeightPublisher,
    Weights,
    WeightSyncError,
    version_dir_name,
)
from .vllm_worker_extension import LegoWeightReloader, read_manifest_version

__all__ = [
    "DiskPublishConfig",
    "DiskWeightPublisher",
    "EngineServerSyncConfig",
    "EngineServerWeightSync",
    "LegoWeightReloader",
    "SglangSyncConfig",
    "SglangWeightSync",
    "VllmSyncConfig",
    "VllmWeightSync",
    "WeightPublisher",
    "WeightSyncError",
    "Weights",
    "read_manifest_version",
    "version_dir_name",
]
