from __future__ import annotations

import pytest
import torch

from lego_rl.trainer import mismatch_metrics, routing_disagreement


def test_identical_logprobs_correlate_perfectly_with_zero_kl() -> None:
    lp = torch.log(torch.tensor([0.9, 0.5, 0.1, 0.3]))
    metrics = mismatch_metrics(lp, lp.clone(), torch.ones(4))
    assert metrics["mismatch/pearson_prob"] == pytest.approx(1.0)
    assert metrics["mismatch/pearson_logprob"] == pytest.approx(1.0)
    assert metrics["mismatch/mean_abs_dprob"] == 0.0
    assert metrics["mismatch/k3_kl"] == 0.0


def test_masked_tokens_do_not_count() -> None:
    rollout = torch.log(torch.tensor([0.9, 0.5, 0.1, 0.3]))
    trainer = rollout.clone()
    trainer[3] = torch.log(torch.tensor(0.99))
    metrics = mismatch_metrics(rollout, trainer, torch.tensor([1.0, 1.0, 1.0, 0.0]))
    assert metrics["mismatch/tokens"] == 3
    assert metrics["mismatch/k3_kl"] == 0.0


def test_k3_kl_matches_its_definition() -> None:
    rollout = torch.log(torch.tensor([0.5, 0.25]))
    trainer = torch.log(torch.tensor([0.25, 0.25]))
    log_r = trainer - rollout
    expected = float((log_r.exp() - log_r - 1).mean())
    assert mismatch_metrics(rollout, trainer, torch.ones(2))["mismatch/k3_kl"] == pytest.approx(expected)


def test_routing_disagreement_compares_expert_sets_not_their_order() -> None:
    replayed = torch.tensor([[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[0, 1], [2, 3]]])
    own = torch.tensor([[[1, 0], [3, 2]], [[4, 5], [6, 1]], [[0, 1], [2, 3]]])
    assert routing_disagreement(replayed, own) == pytest.approx(1 / 3)
    assert routing_disagreement(replayed, own, recorded_T=torch.tensor([1, 0, 1])) == 0.0
