"""Tensors derived from weights (fused, re-laid), kept between inference steps.

An engine decode step is dozens of tiny ops per layer, so re-deriving the same tensor
from unchanged weights every step (concatenating q/k/v, copying experts into another
layout) is a measurable share of it. Under inference mode a derived tensor is kept and
re-made only when a source changed: an in-place weight update (the engine's
`update_weights`, an optimizer step) bumps the source's version counter, and moving or
re-allocating it changes its data pointer. With autograd on, nothing is kept: the
derived tensor must carry gradients to its sources.
"""

from __future__ import annotations

from typing import Callable

import torch


class DerivedWeights:
    """One module's cache of derived tensors, by name."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[tuple[tuple[int, int, torch.device, torch.dtype], ...], torch.Tensor]] = {}

    def get(self, name: str, sources: tuple[torch.Tensor, ...], build: Callable[[], torch.Tensor]) -> torch.Tensor:
        """`build()` (computed from `sources`), kept under inference mode until a source changes."""
        if not torch.is_inference_mode_enabled():
            return build()
        key = tuple((s._version, s.data_ptr(), s.device, s.dtype) for s in sources)
        kept = self._kept.get(name)
        if kept is None or kept[0] != key:
            kept = (key, build())
            self._kept[name] = kept
        return kept[1]
