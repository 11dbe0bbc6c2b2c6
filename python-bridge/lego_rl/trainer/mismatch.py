"""Rollout-vs-trainer agreement, measured every step (the paper's fidelity figures).

All inputs are over trainable tokens only. Peers report healthy MoE runs at
Pearson ~0.999 and k3 KL ~0.002; a misconfigured routing replay drops Pearson
to ~0.75.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _pearson(a: Tensor, b: Tensor) -> float:
    a = a.double() - a.double().mean()
    b = b.double() - b.double().mean()
    denominator = torch.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denominator) if denominator > 0 else float("nan")


def mismatch_metrics(rollout_logprobs_T: Tensor, trainer_logprobs_T: Tensor, mask_T: Tensor) -> dict[str, float]:
    """Pearson of probabilities and of logprobs, mean |delta p|, and k3 KL(rollout || trainer)."""
    keep = mask_T > 0
    rollout = rollout_logprobs_T[keep].detach().double()
    trainer = trainer_logprobs_T[keep].detach().double()
    if rollout.numel() == 0:
        return {}
    log_r = trainer - rollout  # tokens were sampled from the rollout policy
    return {
        "mismatch/pearson_prob": _pearson(rollout.exp(), trainer.exp()),
        "mismatch/pearson_logprob": _pearson(rollout, trainer),
        "mismatch/mean_abs_dprob": float((rollout.exp() - trainer.exp()).abs().mean()),
        "mismatch/k3_kl": float((log_r.exp() - log_r - 1.0).mean()),
        "mismatch/tokens": float(rollout.numel()),
    }


def routing_disagreement(replayed_TLK: Tensor, own_TLK: Tensor, recorded_T: Tensor | None = None) -> float:
    """Fraction of tokens where, in any layer, the replayed expert set differs from the trainer's own top-k."""
    replayed = replayed_TLK.sort(dim=-1).values
    own = own_TLK.to(replayed.dtype).sort(dim=-1).values
    differs_T = (replayed != own).any(dim=-1).any(dim=-1)
    if recorded_T is not None:
        differs_T = differs_T[recorded_T > 0]
    return float(differs_T.float().mean()) if differs_T.numel() else 0.0
