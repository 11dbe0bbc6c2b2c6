"""GSPO, GSPO-token and GRPO against a hand-computed example.

Group of two rollouts, rewards [1, 0]: mean 0.5, std 0.5, so A = [+1, -1].
Trajectory 0: three trainable tokens, log-ratios [2e-4, 1e-4, 3e-4], mean 2e-4,
  s_0 = exp(2e-4) = 1.00020002, inside [1 - 3e-4, 1 + 4e-4]: unclipped,
  loss_0 = -s_0 * A_0 = -1.00020002.
Trajectory 1: two trainable tokens (log-ratio -5e-4 each) and one prompt token,
  s_1 = exp(-5e-4) = 0.99950012; with A_1 = -1 the pessimistic term is the
  clipped one, clip(s_1) * A_1 = -0.9997, so loss_1 = 0.9997 and no gradient flows.
Loss = mean(loss_0, loss_1) = -0.00025001.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lego_rl.trainer import GrpoLoss, GspoLoss, GspoTokenLoss, LossInputs, MismatchCorrection, group_advantages
from lego_rl.trainer.advantages import RolloutOutcome

# (r - mean) / (std + eps) with eps = 1e-6, as the float32 that group_advantages returns.
A = float(np.float32(1.0 / (1.0 + 2e-6)))


def _inputs() -> LossInputs:
    logprobs = torch.tensor([-1.0, -2.0, -0.5, -0.3, -0.7, -5.0], dtype=torch.float64, requires_grad=True)
    return LossInputs(
        logprobs_T=logprobs,
        old_logprobs_T=torch.tensor([-1.0002, -2.0001, -0.5003, -0.2995, -0.6995, -9.0], dtype=torch.float64),
        mask_T=torch.tensor([1, 1, 1, 1, 1, 0], dtype=torch.float64),
        sequence_T=torch.tensor([0, 0, 0, 1, 1, 1]),
        advantages_N=torch.tensor(group_advantages([
            RolloutOutcome(trajectory_id="t0", group_id="g", status="ok", reward=1.0),
            RolloutOutcome(trajectory_id="t1", group_id="g", status="ok", reward=0.0),
        ]).advantages, dtype=torch.float64),
    )


def test_advantages_are_reward_minus_mean_over_std_within_the_group() -> None:
    assert _inputs().advantages_N.tolist() == pytest.approx([A, -A], abs=1e-7)


def test_gspo_reproduces_the_hand_computed_ratios_clipping_and_loss() -> None:
    inputs = _inputs()
    loss, metrics = GspoLoss()(inputs)
    s0, s1 = math.exp(2e-4), math.exp(-5e-4)
    expected = (-s0 * A + (1 - 3e-4) * A) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-10)
    assert loss.item() == pytest.approx(-0.00025001, abs=1e-8)
    assert metrics["loss/clip_frac"] == pytest.approx(2 / 5)
    assert metrics["loss/ratio_mean"] == pytest.approx((s0 + s1) / 2)
    loss.backward()
    grad = inputs.logprobs_T.grad
    assert grad is not None
    # d loss / d log pi_t = -(1/N) * A_0 * s_0 / |y_0| for trajectory 0; trajectory 1 is clipped.
    assert grad[:3].tolist() == pytest.approx([-A * s0 / 6] * 3, abs=1e-10)
    assert grad[3:].tolist() == [0.0, 0.0, 0.0]


def test_gspo_token_has_the_same_value_and_here_the_same_gradients() -> None:
    reference, token = _inputs(), _inputs()
    loss_ref, _ = GspoLoss()(reference)
    loss_tok, _ = GspoTokenLoss()(token)
    assert loss_tok.item() == pytest.approx(loss_ref.item(), abs=1e-15)
    loss_ref.backward()
    loss_tok.backward()
    assert torch.allclose(token.logprobs_T.grad, reference.logprobs_T.grad, atol=1e-15)


def test_grpo_uses_per_token_ratios_clipped_at_0_2() -> None:
    inputs = _inputs()
    loss, metrics = GrpoLoss()(inputs)
    r = [math.exp(x) for x in (2e-4, 1e-4, 3e-4)]
    expected = (-(sum(r) / 3) * A + (2 * math.exp(-5e-4) / 2) * A) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-10)
    assert metrics["loss/clip_frac"] == 0.0


def test_a_sequence_ratio_spans_every_segment_of_its_trajectory() -> None:
    # The same trajectory split into two "segments" (non-adjacent token runs) has one ratio.
    inputs = _inputs()
    interleaved = LossInputs(
        logprobs_T=inputs.logprobs_T.detach()[[0, 3, 1, 4, 2, 5]].requires_grad_(),
        old_logprobs_T=inputs.old_logprobs_T[[0, 3, 1, 4, 2, 5]],
        mask_T=inputs.mask_T[[0, 3, 1, 4, 2, 5]],
        sequence_T=inputs.sequence_T[[0, 3, 1, 4, 2, 5]],
        advantages_N=inputs.advantages_N,
    )
    assert GspoLoss()(interleaved)[0].item() == pytest.approx(GspoLoss()(inputs)[0].item(), abs=1e-15)


def test_truncated_importance_sampling_caps_the_rollout_trainer_weight() -> None:
    inputs = _inputs()
    rollout = inputs.old_logprobs_T.clone()
    rollout[0] -= math.log(10.0)  # the engine thought token 0 was 10x less likely
    corrected = LossInputs(**{**{f: getattr(inputs, f) for f in inputs.__dataclass_fields__}, "rollout_logprobs_T": rollout})
    weights = MismatchCorrection(kind="tis", cap=2.0).weights_T(corrected.old_logprobs_T, rollout)
    assert weights[0].item() == pytest.approx(2.0)
    assert weights[1:5].tolist() == pytest.approx([1.0] * 4)
    masked = MismatchCorrection(kind="mis", cap=2.0).weights_T(corrected.old_logprobs_T, rollout)
    assert masked[:2].tolist() == [0.0, 1.0]
    loss, _ = GspoLoss(correction=MismatchCorrection(kind="tis"))(corrected)
    assert torch.isfinite(loss)


def test_kl_to_a_reference_is_added_only_when_beta_is_positive() -> None:
    inputs = _inputs()
    with_ref = LossInputs(**{**{f: getattr(inputs, f) for f in inputs.__dataclass_fields__}, "ref_logprobs_T": inputs.old_logprobs_T})
    plain, _ = GspoLoss()(with_ref)
    penalised, metrics = GspoLoss(kl_beta=0.1)(with_ref)
    assert penalised.item() > plain.item()
    assert metrics["loss/kl_ref"] > 0


def test_group_advantages_exclude_env_errors_and_skip_groups_without_signal() -> None:
    result = group_advantages([
        RolloutOutcome(trajectory_id="a1", group_id="a", status="ok", reward=1.0),
        RolloutOutcome(trajectory_id="a2", group_id="a", status="agent_error", reward=0.0),
        RolloutOutcome(trajectory_id="a3", group_id="a", status="env_error", reward=None),
        RolloutOutcome(trajectory_id="b1", group_id="b", status="ok", reward=1.0),
        RolloutOutcome(trajectory_id="b2", group_id="b", status="ok", reward=1.0),
        RolloutOutcome(trajectory_id="c1", group_id="c", status="timeout", reward=0.0),
        RolloutOutcome(trajectory_id="c2", group_id="c", status="env_error", reward=0.0),
    ])
    assert result.trajectory_ids == ["a1", "a2"]
    assert result.advantages.tolist() == pytest.approx([A, -A], abs=1e-6)
    assert (result.groups_trained, result.groups_skipped_identical, result.groups_skipped_singleton) == (1, 1, 1)
    assert result.excluded == {"env_error": 2}


def test_rollouts_beyond_the_staleness_bound_are_excluded_before_grouping() -> None:
    result = group_advantages([
        RolloutOutcome(trajectory_id="a1", group_id="a", status="ok", reward=1.0, policy_version=5),
        RolloutOutcome(trajectory_id="a2", group_id="a", status="ok", reward=0.0, policy_version=4),
        RolloutOutcome(trajectory_id="a3", group_id="a", status="ok", reward=1.0, policy_version=3),
        RolloutOutcome(trajectory_id="a4", group_id="a", status="ok", reward=1.0, policy_version=None),
    ], min_policy_version=4)
    # a3 is stale; a4's version is unknown (no turns), so no bound can exclude it.
    assert result.trajectory_ids == ["a1", "a2", "a4"]
    assert result.excluded == {"stale": 1}


def _shared_prefix_group() -> tuple[LossInputs, torch.Tensor]:
    """On-policy (ratio 1), rewards [1, 0]: a 4-token success and a 2-token failure whose 2 tokens
    are the success's first 2 (the same tokens, so the same log pi: tied through one parameter each)."""
    theta = torch.tensor([-0.1, -0.2, -0.3, -0.4], dtype=torch.float64, requires_grad=True)
    logprobs = torch.cat([theta, theta[:2]])
    inputs = LossInputs(
        logprobs_T=logprobs,
        old_logprobs_T=logprobs.detach().clone(),
        mask_T=torch.ones(6, dtype=torch.float64),
        sequence_T=torch.tensor([0, 0, 0, 0, 1, 1]),
        advantages_N=torch.tensor([A, -A], dtype=torch.float64),
    )
    return inputs, theta


def test_sequence_mean_pushes_a_shared_prefix_down_when_the_failure_is_shorter() -> None:
    # GSPO as in the paper weighs each token 1/|y_i|: the failure's -A/2 per prefix token beats the success's +A/4.
    inputs, theta = _shared_prefix_group()
    loss, _ = GspoTokenLoss()(inputs)
    loss.backward()
    assert theta.grad is not None
    # d loss / d theta (descent lowers log pi where positive): prefix (-A/4 + A/2) / N, the rest -A/4 / N.
    assert theta.grad.tolist() == pytest.approx([A / 8, A / 8, -A / 8, -A / 8], abs=1e-12)


def test_token_sum_norm_leaves_a_shared_prefix_alone_and_raises_the_success_s_own_tokens() -> None:
    inputs, theta = _shared_prefix_group()
    for loss_class in (GspoLoss, GspoTokenLoss):
        theta.grad = None
        loss, _ = loss_class(aggregation="token_sum_norm", token_norm=4)(inputs)
        loss.backward()
        assert theta.grad is not None
        # Every token weighs 1 / (N * token_norm) = 1/8: +A and -A cancel on the prefix.
        assert theta.grad.tolist() == pytest.approx([0.0, 0.0, -A / 8, -A / 8], abs=1e-12), loss_class.__name__


def test_token_sum_norm_is_the_sequence_mean_when_every_sequence_has_token_norm_tokens() -> None:
    inputs = _inputs()
    # Trajectories of 3 and 2 trainable tokens: with equal lengths the two agree; here they differ by the weights.
    mean, _ = GspoLoss()(inputs)
    summed, _ = GspoLoss(aggregation="token_sum_norm", token_norm=3)(_inputs())
    s0 = math.exp(2e-4)
    assert mean.item() == pytest.approx((-s0 * A + (1 - 3e-4) * A) / 2, abs=1e-10)
    assert summed.item() == pytest.approx((3 * -s0 * A + 2 * (1 - 3e-4) * A) / (2 * 3), abs=1e-10)
