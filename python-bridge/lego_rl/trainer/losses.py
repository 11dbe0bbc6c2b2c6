"""Policy-gradient losses as small sibling classes sharing one interface.

Legend (packed token layout): T = tokens of every trajectory in the step,
concatenated; N = trajectories. `sequence_T[t]` says which trajectory token t
belongs to, so a trajectory's tokens may come from several segments (GSPO's
sequence ratio is over all of a trajectory's sampled tokens).

Every loss returns (loss, metrics) with slash-namespaced metric keys.
1. GspoLoss: s_i = exp(mean_t(log pi_theta - log pi_old)) over y_i's sampled
   tokens; loss_i = -min(s_i A_i, clip(s_i, 1-eps_low, 1+eps_high) A_i)
   (GSPO, Zheng et al. 2025, eqs. 5-7; eps 3e-4 / 4e-4 from its experiments).
2. GspoTokenLoss: s_i,t = sg[s_i] * pi_theta(y_t) / sg[pi_theta(y_t)] (GSPO eq. 13):
   the same value as s_i, with per-token gradients.
3. GrpoLoss: the token-level ratio pi_theta(y_t)/pi_old(y_t), clip 0.2 (GRPO).
Optional on every loss: a rollout-vs-trainer mismatch correction (TIS or MIS)
and a k3 KL penalty to a reference policy (beta = 0 by default, as in GSPO).

Aggregation (`aggregation`): "sequence_mean" (the papers': mean over a sequence's
tokens, then over sequences) gives each token of y_i the weight 1/|y_i|, so a
short failed rollout pushes down a prefix it shares with a longer successful one
harder than the success pushes it up. "token_sum_norm" (Dr. GRPO, Liu et al. 2025)
sums over tokens and divides by N * token_norm, a constant: every token weighs the
same, and a prefix shared across a group with zero-mean advantages gets no net push.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor


@dataclass(frozen=True, kw_only=True, slots=True)
class LossInputs:
    logprobs_T: Tensor
    """Trainer log pi_theta of each token (requires grad)."""
    old_logprobs_T: Tensor
    """log pi_old: the behaviour policy's logprob (rollout engine, or trainer recompute at theta_old)."""
    mask_T: Tensor
    """1.0 where the token trains."""
    sequence_T: Tensor
    """int64 trajectory index of each token, in [0, N)."""
    advantages_N: Tensor
    rollout_logprobs_T: Tensor | None = None
    """The engine's logprobs, for mismatch correction when old_logprobs_T is a trainer recompute."""
    ref_logprobs_T: Tensor | None = None
    """Reference policy logprobs, for the KL penalty."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MismatchCorrection:
    """Importance correction of the rollout/trainer mismatch: w_t = pi_old(y_t) / pi_rollout(y_t), detached."""

    kind: Literal["tis", "mis"]
    """tis: truncate w at `cap` (truncated IS); mis: drop tokens with w outside [1/cap, cap] (masked IS)."""
    cap: float = 2.0
    """The truncation / masking threshold C."""

    def weights_T(self, old_logprobs_T: Tensor, rollout_logprobs_T: Tensor) -> Tensor:
        w = torch.exp(old_logprobs_T - rollout_logprobs_T).detach()
        if self.kind == "tis":
            return w.clamp(max=self.cap)
        keep = (w <= self.cap) & (w >= 1.0 / self.cap)
        return keep.to(w.dtype)


def _per_sequence_mean(values_T: Tensor, mask_T: Tensor, sequence_T: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """(mean over each sequence's masked tokens [N], masked-token count [N])."""
    totals = torch.zeros(n, dtype=values_T.dtype, device=values_T.device).index_add(0, sequence_T, values_T * mask_T)
    counts = torch.zeros(n, dtype=mask_T.dtype, device=mask_T.device).index_add(0, sequence_T, mask_T)
    return totals / counts.clamp(min=1), counts


@dataclass(frozen=True, kw_only=True, slots=True)
class ClippedSurrogateLoss:
    """-min(ratio * A, clip(ratio) * A) averaged per sequence, then over sequences.

    Subclasses differ only in how they form the per-token ratio.
    """

    eps_low: float
    eps_high: float
    correction: MismatchCorrection | None = None
    kl_beta: float = 0.0
    aggregation: Literal["sequence_mean", "token_sum_norm"] = "sequence_mean"
    token_norm: int = 1024
    """token_sum_norm's constant divisor per sequence (a constant, so ranks' shards add up to the whole)."""

    def ratio_T(self, inputs: LossInputs) -> Tensor:
        raise NotImplementedError

    def __call__(self, inputs: LossInputs) -> tuple[Tensor, dict[str, float]]:
        n = inputs.advantages_N.shape[0]
        mask_T = inputs.mask_T.to(inputs.logprobs_T.dtype)
        ratio_T = self.ratio_T(inputs)
        advantage_T = inputs.advantages_N[inputs.sequence_T].to(ratio_T.dtype)
        clipped_T = ratio_T.clamp(1.0 - self.eps_low, 1.0 + self.eps_high)
        surrogate_T = torch.minimum(ratio_T * advantage_T, clipped_T * advantage_T)
        weight_T = mask_T
        if self.correction is not None:
            if inputs.rollout_logprobs_T is None:
                raise ValueError("mismatch correction needs rollout_logprobs_T (the engine's logprobs)")
            weight_T = weight_T * self.correction.weights_T(inputs.old_logprobs_T, inputs.rollout_logprobs_T)
        per_sequence_N, counts_N = _per_sequence_mean(-surrogate_T, weight_T, inputs.sequence_T, n)
        trained_N = counts_N > 0
        if not trained_N.any():
            loss = ratio_T.sum() * 0.0
        elif self.aggregation == "token_sum_norm":
            loss = (-surrogate_T * weight_T).sum() / (trained_N.sum() * self.token_norm)
        else:
            loss = per_sequence_N[trained_N].mean()
        metrics = {"loss/policy": float(loss.detach())}
        if self.kl_beta:
            if inputs.ref_logprobs_T is None:
                raise ValueError("kl_beta > 0 needs ref_logprobs_T")
            log_r = inputs.ref_logprobs_T - inputs.logprobs_T
            kl_T = torch.exp(log_r) - log_r - 1.0  # k3 estimator (Schulman 2020), unbiased and >= 0
            kl_N, _ = _per_sequence_mean(kl_T, mask_T, inputs.sequence_T, n)
            kl = kl_N[trained_N].mean()
            loss = loss + self.kl_beta * kl
            metrics["loss/kl_ref"] = float(kl.detach())
        was_clipped_T = (ratio_T.detach() != clipped_T.detach()) & (mask_T > 0)
        metrics["loss/clip_frac"] = float(was_clipped_T.sum() / mask_T.sum().clamp(min=1))
        ratio_mean, _ = _per_sequence_mean(ratio_T.detach(), mask_T, inputs.sequence_T, n)
        metrics["loss/ratio_mean"] = float(ratio_mean[trained_N].mean()) if trained_N.any() else 1.0
        metrics["loss/total"] = float(loss.detach())
        return loss, metrics


@dataclass(frozen=True, kw_only=True, slots=True)
class GspoLoss(ClippedSurrogateLoss):
    """Sequence-level ratio; every token of a trajectory carries s_i."""

    eps_low: float = 3e-4
    eps_high: float = 4e-4

    def ratio_T(self, inputs: LossInputs) -> Tensor:
        n = inputs.advantages_N.shape[0]
        log_ratio_T = inputs.logprobs_T - inputs.old_logprobs_T
        mean_log_ratio_N, _ = _per_sequence_mean(log_ratio_T, inputs.mask_T.to(log_ratio_T.dtype), inputs.sequence_T, n)
        return torch.exp(mean_log_ratio_N)[inputs.sequence_T]


@dataclass(frozen=True, kw_only=True, slots=True)
class GspoTokenLoss(GspoLoss):
    """s_i,t = sg[s_i] * pi_theta(y_t) / sg[pi_theta(y_t)]: value s_i, gradient per token."""

    def ratio_T(self, inputs: LossInputs) -> Tensor:
        s_T = GspoLoss.ratio_T(self, inputs).detach()
        return s_T * torch.exp(inputs.logprobs_T - inputs.logprobs_T.detach())


@dataclass(frozen=True, kw_only=True, slots=True)
class GrpoLoss(ClippedSurrogateLoss):
    """Token-level ratio, for comparison."""

    eps_low: float = 0.2
    eps_high: float = 0.2

    def ratio_T(self, inputs: LossInputs) -> Tensor:
        return torch.exp(inputs.logprobs_T - inputs.old_logprobs_T)
