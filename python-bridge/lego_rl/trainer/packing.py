"""Turns decoded Trajectory batches into one packed forward pass.

Legend: T packed tokens (every trained segment end to end), R trainable tokens,
N trajectories, L MoE layers, K experts per token.

1. Every segment of a trained trajectory is one sequence of the packed input;
   segments attend only to themselves (DESIGN.md, "Segment").
2. Token t of a segment is predicted by the logits at its row t - 1, so only
   those R rows go through the LM head (`logit_rows_R`).
3. Recorded routing is replayed per token; where the engine did not record it
   (`routing_recorded` = 0) the replay slot holds -1 and the trainer routes itself.
4. Token ids, logprobs and routing are read from numpy views over the received
   Arrow buffers; the only copies are the dtype conversions torch needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..schema import DecodedBatch, batch_records
from ..schema.generated import Trajectory
from .advantages import GroupAdvantages

UNRECORDED = -1


class PackingError(ValueError):
    """A trajectory cannot be packed (e.g. a segment starts with a trainable token)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PackedStep:
    input_ids_T: torch.Tensor
    """int64 token ids of every segment, end to end."""
    seq_lens: list[int]
    """Tokens per segment, in packing order."""
    routing_TLK: torch.Tensor | None
    """int64 recorded experts, -1 where not recorded; None for dense models or when not replaying."""
    logit_rows_R: torch.Tensor
    """Packed row whose logits predict each trainable token."""
    targets_R: torch.Tensor
    """The trainable tokens themselves."""
    rollout_logprobs_R: torch.Tensor
    """float32 logprob the engine reported for each trainable token."""
    sequence_R: torch.Tensor
    """Trajectory index in [0, N) of each trainable token."""
    advantages_N: torch.Tensor
    trajectory_ids: list[str]
    loss_scale: float = 1.0
    """This rank's share of the step's trajectories (its loss is a mean over its own)."""

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids_T.shape[0])


def trajectories_of(batches: Sequence[DecodedBatch]) -> dict[str, Trajectory]:
    out: dict[str, Trajectory] = {}
    for decoded in batches:
        for trajectory in batch_records(decoded):
            out[trajectory.trajectory_id] = trajectory
    return out


def pack_step(
    trajectories: dict[str, Trajectory],
    advantages: GroupAdvantages,
    *,
    layers: int,
    top_k: int,
    replay: bool = True,
    loss_scale: float = 1.0,
) -> PackedStep:
    """Packs the trajectories that `advantages` selected, in its order."""
    ids, routing, rows, targets, rollout, sequence, lens = [], [], [], [], [], [], []
    offset = 0
    for n, trajectory_id in enumerate(advantages.trajectory_ids):
        trajectory = trajectories[trajectory_id]
        for segment in trajectory.segments:
            length = segment.token_ids.size
            if length == 0:
                continue
            trainable = np.flatnonzero(segment.loss_mask)
            if trainable.size and trainable[0] == 0:
                raise PackingError(
                    f"trajectory {trajectory_id!r} segment {segment.segment_id!r} starts with a trainable token; "
                    "nothing precedes it to predict it from"
                )
            ids.append(segment.token_ids)
            lens.append(length)
            rows.append(offset + trainable - 1)
            targets.append(segment.token_ids[trainable])
            rollout.append(segment.logprobs[trainable])
            sequence.append(np.full(trainable.size, n, dtype=np.int64))
            if replay and segment.routing is not None:
                r = segment.routing.reshape(length, layers, top_k).astype(np.int64)
                r[segment.routing_recorded == 0] = UNRECORDED
                routing.append(r)
            offset += length
    if replay and routing and len(routing) != len(lens):
        raise PackingError("some segments carry routing and others do not; a batch must be all MoE or all dense")

    def cat(parts: list[np.ndarray], dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.concatenate(parts)).to(dtype) if parts else torch.zeros(0, dtype=dtype)

    return PackedStep(
        input_ids_T=cat(ids, torch.int64),
        seq_lens=lens,
        routing_TLK=cat(routing, torch.int64) if replay and routing else None,
        logit_rows_R=cat(rows, torch.int64),
        targets_R=cat(targets, torch.int64),
        rollout_logprobs_R=cat(rollout, torch.float32),
        sequence_R=cat(sequence, torch.int64),
        advantages_N=torch.from_numpy(advantages.advantages.copy()),
        trajectory_ids=list(advantages.trajectory_ids),
        loss_scale=loss_scale,
    )


def split_for_ranks(advantages: GroupAdvantages, world: int) -> list[GroupAdvantages]:
    """Contiguous, nearly equal shares of the trajectories, one per data-parallel rank."""
    n = len(advantages.trajectory_ids)
    if n < world:
        raise PackingError(f"{n} trainable trajectories cannot feed {world} ranks; every rank needs at least one")
    bounds = [round(i * n / world) for i in range(world + 1)]
    return [
        GroupAdvantages(
            trajectory_ids=advantages.trajectory_ids[a:b],
            advantages=advantages.advantages[a:b],
            groups_trained=advantages.groups_trained,
            groups_skipped_identical=advantages.groups_skipped_identical,
            groups_skipped_singleton=advantages.groups_skipped_singleton,
            excluded=advantages.excluded,
        )
        for a, b in zip(bounds, bounds[1:])
    ]
