from __future__ import annotations

import numpy as np
import pytest
import torch

from lego_rl.schema import decode_batch, encode_batch
from lego_rl.schema.vectors import build_batch, load_cases
from lego_rl.trainer import group_advantages
from lego_rl.trainer.advantages import RolloutOutcome
from lego_rl.trainer.packing import UNRECORDED, PackingError, pack_step, trajectories_of

CASE = next(c for c in load_cases()["trajectory_batches"] if c["name"] == "trajectories-moe-u8")


def _packed(rows):  # type: ignore[no-untyped-def]
    rows[1].status, rows[1].reward = "ok", 0.0  # make the group trainable: rewards 1 and 0
    routing = build_batch(CASE, "Trajectory")[1]
    trajectories = trajectories_of([decode_batch(encode_batch("Trajectory", rows, routing))])
    advantages = group_advantages([RolloutOutcome(trajectory_id=t.trajectory_id, group_id=t.group_id, status=t.status,
                                                  reward=t.reward) for t in trajectories.values()])
    return pack_step(trajectories, advantages, layers=4, top_k=2), rows


def test_each_trainable_token_is_predicted_from_the_row_before_it() -> None:
    rows, _ = build_batch(CASE, "Trajectory")
    rows[0].segments[0].logprobs[10:13] = -1.0  # the golden case carries NaN/inf on purpose
    step, rows = _packed(rows)
    segment = rows[0].segments[0]
    trainable = np.flatnonzero(segment.loss_mask)
    # The empty segment is dropped, the trajectory without segments too. The 23-token segment
    # is packed up to its last trainable token, exclusive: as an input, that token and the
    # template tokens after it would only predict tokens nothing trains.
    assert segment.token_ids.size == 23 and step.seq_lens == [int(trainable[-1]), 6]
    assert step.unpacked_tail_tokens == 23 - int(trainable[-1])
    assert step.source_tokens == 23 + 6
    assert step.logit_rows_R.tolist() == (trainable - 1).tolist()
    assert step.targets_R.tolist() == segment.token_ids[trainable].tolist()
    assert torch.equal(step.rollout_logprobs_R, torch.from_numpy(segment.logprobs[trainable]))
    assert step.sequence_R.tolist() == [0] * trainable.size


def test_unrecorded_routing_is_marked_for_the_trainer_to_route_itself() -> None:
    rows, _ = build_batch(CASE, "Trajectory")
    step, _ = _packed(rows)
    assert step.routing_TLK is not None and step.routing_TLK.shape == (step.num_tokens, 4, 2)
    assert (step.routing_TLK[[0, 5]] == UNRECORDED).all()
    assert (step.routing_TLK[[1, 2, 3, 4, 6]] >= 0).all()


def test_a_segment_that_starts_with_a_trainable_token_is_refused() -> None:
    rows, _ = build_batch(CASE, "Trajectory")
    rows[0].segments[0].loss_mask[0] = 1
    rows[0].segments[0].provenance[0] = 2
    with pytest.raises(PackingError, match="starts with a trainable token"):
        _packed(rows)
