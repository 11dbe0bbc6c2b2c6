"""One GSPO update on one rank: recompute logprobs on the recorded tokens, measure, step.

1. Logprobs are recomputed on exactly the recorded tokens, replaying the recorded
   experts (R3) unless `replay_routing` is off; the trainer's own top-k is still
   computed so routing disagreement is reported every step.
2. pi_old is the rollout engine's logprob (one update per batch, so the engine's
   weights are the trainer's theta_old up to the staleness bound); the mismatch
   between the two is measured every step and can be corrected with TIS / MIS.
3. The loss class is chosen by name from one table; variants are classes, not flags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import torch

from ..model import MoeBlock
from .losses import ClippedSurrogateLoss, GrpoLoss, GspoLoss, GspoTokenLoss, LossInputs, MismatchCorrection
from .mismatch import mismatch_metrics, routing_disagreement
from .packing import UNRECORDED, PackedStep

LOSSES: dict[str, type[ClippedSurrogateLoss]] = {"gspo": GspoLoss, "gspo_token": GspoTokenLoss, "grpo": GrpoLoss}


@dataclass(frozen=True, kw_only=True, slots=True)
class StepConfig:
    """How one update is computed."""

    loss: Literal["gspo", "gspo_token", "grpo"] = "gspo"
    """Which policy loss (GSPO by default, as in the paper)."""
    lr: float = 1e-5
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    replay_routing: bool = True
    """Replay the rollout's expert choices (R3). Off only to measure what replay buys."""
    correction: Literal["none", "tis", "mis"] = "none"
    """Rollout/trainer mismatch correction."""
    kl_beta: float = 0.0
    """Weight of the k3 KL to a reference policy (0: no reference model is kept)."""
    eps_low: float | None = None
    """Clip range override; None keeps the loss's default (GSPO 3e-4 / 4e-4)."""
    eps_high: float | None = None
    loss_aggregation: Literal["sequence_mean", "token_sum_norm"] = "sequence_mean"
    """How token losses add up (losses.py): the papers' per-sequence mean, or Dr. GRPO's length-unbiased sum."""
    token_norm: int = 1024
    """token_sum_norm's constant divisor per sequence."""
    trainable_parameters: str | None = None
    """Regular expression searched in each parameter's name: only matching parameters are updated (None: all)."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up over the first N updates (0: the full rate from the first)."""


def build_loss(config: StepConfig) -> ClippedSurrogateLoss:
    kwargs: dict[str, object] = {"kl_beta": config.kl_beta, "aggregation": config.loss_aggregation, "token_norm": config.token_norm}
    if config.correction != "none":
        kwargs["correction"] = MismatchCorrection(kind=config.correction)
    if config.eps_low is not None:
        kwargs["eps_low"] = config.eps_low
    if config.eps_high is not None:
        kwargs["eps_high"] = config.eps_high
    return LOSSES[config.loss](**kwargs)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True, slots=True)
class Recomputed:
    logprobs_R: torch.Tensor
    """float32 trainer logprob of each trainable token (with grad when computed in train mode)."""
    own_routing_TLK: torch.Tensor | None
    """The experts the trainer's router would pick for every packed token."""


def _capture_top_k(sink: list[torch.Tensor], k: int):  # type: ignore[no-untyped-def]
    def hook(module: torch.nn.Module, args: object, logits_TE: torch.Tensor) -> None:
        sink.append(torch.topk(logits_TE.detach(), k, dim=-1).indices)  # top-k of logits = top-k of softmax

    return hook


def recompute_logprobs(model: torch.nn.Module, step: PackedStep, *, replay: bool) -> Recomputed:
    """Trainer logprobs of the trainable tokens, and the router's own top-k at every MoE layer.

    The own top-k is read with forward hooks on the routers, so under replay it is the
    choice the trainer's router makes on the very hidden states the replayed pass produced.
    """
    own: list[torch.Tensor] = []
    blocks = [m for m in model.modules() if isinstance(m, MoeBlock)]  # forward order
    hooks = [block.gate.register_forward_hook(_capture_top_k(own, block.top_k)) for block in blocks]
    try:
        output = model(
            step.input_ids_T,
            seq_lens=step.seq_lens,
            routing_replay=step.routing_TLK if replay else None,
            logits_rows=step.logit_rows_R,
            prefix_of=step.prefix_of,
        )
    finally:
        for hook in hooks:
            hook.remove()
    logprobs_RV = torch.log_softmax(output.logits.float(), dim=-1)
    logprobs_R = logprobs_RV.gather(1, step.targets_R[:, None]).squeeze(1)
    return Recomputed(logprobs_R=logprobs_R, own_routing_TLK=torch.stack(own, dim=1) if own else None)


def trainable_parameters(model: torch.nn.Module, pattern: str | None) -> list[torch.nn.Parameter]:
    """The parameters an update moves: all, or those whose name `pattern` matches (the rest stop needing grads).

    A pattern that matches nothing is a mistake, never a silent update of nothing.
    """
    named = list(model.named_parameters())
    if pattern is None:
        return [p for _, p in named]
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise ValueError(f"trainable_parameters {pattern!r} is not a regular expression: {e}") from e
    trained = [p for name, p in named if compiled.search(name)]
    if not trained:
        examples = ", ".join(name for name, _ in named[:4])
        tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
        hint = "; the output projection is tied to model.embed_tokens.weight and has no name of its own" if tied else ""
        raise ValueError(f"trainable_parameters {pattern!r} matches no parameter of the model (names look like: {examples}, …{hint})")
    for name, p in named:
        if not compiled.search(name):
            p.requires_grad_(False)
    return trained


class PolicyUpdater:
    """Owns the optimizer of one rank's model and applies GSPO updates.

    With `expert_group` set, the model's experts are sharded over that group
    (expert_parallel.shard_experts): each rank's loss is scaled by its share of the
    step, replicated gradients are summed across ranks, and the gradient norm is global.
    """

    def __init__(self, model: torch.nn.Module, config: StepConfig, *, expert_group: object | None = None) -> None:
        self.model = model
        self.config = config
        self.loss = build_loss(config)
        # fused: one kernel over all parameters instead of a Python loop per tensor (3x
        # faster on CPU for the tiny model); same update rule as the default AdamW.
        self.optimizer = torch.optim.AdamW(trainable_parameters(model, config.trainable_parameters), lr=config.lr,
                                           weight_decay=config.weight_decay, fused=True)
        self.expert_group = expert_group

    def _warmed_up_lr(self) -> float:
        """The rate of the coming update: counted from the optimizer's own step, so a resumed job continues its warm-up."""
        if self.config.warmup_steps <= 0:
            return self.config.lr
        # AdamW counts per parameter and skips one without a gradient: the most-stepped one counts the updates.
        done = max((int(float(state.get("step", 0))) for state in self.optimizer.state.values()), default=0)
        return self.config.lr * min(1.0, (done + 1) / self.config.warmup_steps)

    def _sync_and_clip(self) -> float:
        if self.expert_group is None:
            return float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm))
        import torch.distributed as dist

        from ..model import allreduce_replicated_grads, replicated_parameters

        replicated = replicated_parameters(self.model)
        allreduce_replicated_grads(replicated, self.expert_group)  # type: ignore[arg-type]
        replicated_ids = {id(p) for p in replicated}
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        zero = torch.zeros((), device=grads[0].device if grads else None)
        sharded_sq = sum((p.grad.pow(2).sum() for p in self.model.parameters()
                          if p.grad is not None and id(p) not in replicated_ids), zero)
        dist.all_reduce(sharded_sq, group=self.expert_group)  # type: ignore[arg-type]
        replicated_sq = sum((p.grad.pow(2).sum() for p in replicated if p.grad is not None), zero)
        norm = torch.sqrt(replicated_sq + sharded_sq)
        coef = torch.clamp(self.config.max_grad_norm / (norm + 1e-6), max=1.0)
        for grad in grads:
            grad.mul_(coef)
        return float(norm)

    def update(self, step: PackedStep) -> dict[str, float]:
        """One optimizer step on `step`; returns slash-namespaced metrics."""
        self.model.train()
        step = step.to(next(self.model.parameters()).device)  # packed on the CPU; a GPU rank trains on CUDA
        recomputed = recompute_logprobs(self.model, step, replay=self.config.replay_routing)
        ones_R = torch.ones_like(recomputed.logprobs_R)
        metrics = mismatch_metrics(step.rollout_logprobs_R, recomputed.logprobs_R, ones_R)
        if step.routing_TLK is not None and recomputed.own_routing_TLK is not None:
            recorded_T = (step.routing_TLK[:, 0, 0] != UNRECORDED).to(torch.int64)
            metrics["routing/replay_disagreement"] = routing_disagreement(
                step.routing_TLK, recomputed.own_routing_TLK.to(torch.int64), recorded_T
            )
        loss, loss_metrics = self.loss(
            LossInputs(
                logprobs_T=recomputed.logprobs_R,
                old_logprobs_T=step.rollout_logprobs_R,
                mask_T=ones_R,
                sequence_T=step.sequence_R,
                advantages_N=step.advantages_N,
                rollout_logprobs_T=step.rollout_logprobs_R,
            )
        )
        self.optimizer.zero_grad(set_to_none=True)
        (loss * step.loss_scale).backward()
        grad_norm = self._sync_and_clip()
        lr = self._warmed_up_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        metrics.update(loss_metrics)
        metrics["optim/grad_norm"] = float(grad_norm)
        # The monitor's lr_zero alert reads this: a schedule that decays to 0 trains silently on nothing.
        metrics["optim/lr"] = float(self.optimizer.param_groups[0]["lr"])
        metrics["batch/tokens"] = float(step.source_tokens)
        metrics["batch/packed_tokens"] = float(step.num_tokens)
        metrics["batch/trainable_tokens"] = float(step.targets_R.numel())
        metrics["batch/trajectories"] = float(len(step.trajectory_ids))
        return metrics
