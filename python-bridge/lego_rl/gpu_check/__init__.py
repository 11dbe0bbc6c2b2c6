"""`scripts/gpu-check` (python -m lego_rl.gpu_check): the GPU path measured in one short run, one JSON line.

Parts: the bf16 engine on CUDA (tokens/s), the trainer on CUDA recomputing the engine's tokens with
and without routing replay (Pearson of probabilities), one GSPO step on CUDA (seconds, the update the
Ray trainer ranks run), and a real vLLM or SGLang server when one is importable there.
"""

from .measure import GpuCheckConfig, measure
from .server import probe_server

__all__ = ["GpuCheckConfig", "measure", "probe_server"]
