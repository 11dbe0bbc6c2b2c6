"""vLLM worker extension: reload policy weights from a lego-rl weights directory, with a version.

Start vLLM with this class mixed into every worker and the dev endpoints on:

    VLLM_SERVER_DEV_MODE=1 vllm serve <model> \
        --worker-extension-cls lego_rl.weights.vllm_worker_extension.LegoWeightReloader

vLLM adds `--worker-extension-cls` to each GPU worker's base classes, so these methods run
with `self` being the worker (`self.model_runner.model` is the loaded nn.Module; the vLLM
RLHF examples, examples/offline_inference/rlhf_utils.py, use the same attribute and
`model.load_weights(weights=iterable of (name, tensor))`). The trainer reaches them through
`POST /collective_rpc` (vllm/entrypoints/serve/dev/rpc/api_router.py, dev mode only), which
passes only JSON strings as args and returns each worker's dict result in `{"results": [...]}`.

Design:
1. Disk, not NCCL: every tensor-parallel worker reads the whole directory and the model's own
   `load_weights` shards it, so the trainer needs no process group with the server and the
   same directory serves any TP/PP layout. NCCL broadcast is the faster later step.
2. Versions only move forward: a reload whose version is not above the one served is refused,
   so a restarted or misconfigured trainer cannot roll a server back to older weights.
3. The served version is worker state, read back with `lego_served_weights` (a client checks
   every worker agrees before trusting it).

No vLLM import at module level: the module imports (and is unit-tested) without vLLM.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MANIFEST = "weight_version.json"
"""File in every published weights directory: the lego_rl.schema WeightVersion record as JSON."""

LOAD_METHOD = "lego_load_weights_from_dir"
SERVED_METHOD = "lego_served_weights"


def read_manifest_version(weights_dir: str | Path) -> int:
    """The version a published directory declares (its MANIFEST), or ValueError naming the directory."""
    path = Path(weights_dir) / MANIFEST
    try:
        version = json.loads(path.read_text())["version"]
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"{path}: not a lego-rl weights directory ({error})") from error
    if not isinstance(version, int):
        raise ValueError(f"{path}: version is {version!r}, expected an integer")
    return version


class LegoWeightReloader:
    """Methods vLLM mixes into its worker; reached by name through collective_rpc."""

    def lego_load_weights_from_dir(self, weights_dir: str, version: str) -> dict[str, Any]:
        """Load every *.safetensors tensor under `weights_dir` into the served model and serve `version`.

        Args arrive as strings because /collective_rpc accepts only JSON strings.
        """
        from safetensors import safe_open

        target = int(version)
        served = getattr(self, "_lego_weight_version", None)
        if served is not None and target <= served:
            raise ValueError(f"refusing weights v{target} from {weights_dir}: this worker already serves v{served}")
        declared = read_manifest_version(weights_dir)
        if declared != target:
            raise ValueError(f"{weights_dir} holds weights v{declared}, asked to load v{target}")
        files = sorted(Path(weights_dir).glob("*.safetensors"))
        if not files:
            raise ValueError(f"{weights_dir}: no *.safetensors files")

        def tensors() -> Any:
            # One tensor at a time, so host memory holds one tensor, not the whole model.
            for file in files:
                with safe_open(str(file), framework="pt") as handle:
                    for name in handle.keys():
                        yield name, handle.get_tensor(name)

        model = self.model_runner.model  # type: ignore[attr-defined]  # the vLLM worker's
        loaded = model.load_weights(weights=tensors())
        self._lego_weight_version = target
        self._lego_weight_path = weights_dir
        return {"version": target, "path": weights_dir, "tensors": len(loaded) if loaded is not None else None}

    def lego_served_weights(self) -> dict[str, Any]:
        """Which lego-rl weights this worker serves: version None means the weights vLLM started with."""
        return {"version": getattr(self, "_lego_weight_version", None), "path": getattr(self, "_lego_weight_path", None)}
