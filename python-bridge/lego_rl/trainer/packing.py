"""Turns decoded Trajectory batches into one packed forward pass.

Legend: T packed tokens (every trained segment end to end), R trainable tokens,
N trajectories, L MoE layers, K experts per token.

1. Every segment of a trained trajectory is one sequence of the packed input;
   segments attend only to themselves.
2. Token t of a segment is predicted by the logits at its row t - 1, so only
   those R rows go through the LM head (`logit_rows_R`).
3. Recorded routing is replayed per token; where the engine did not record it
   (`routing_recorded` = 0) the replay slot holds -1 and the trainer routes itself.
4. Token ids, logprobs and routing are read from numpy views over the received
   Arrow buffers; the only copies are the dtype conversions torch needs.
5. Shared prefixes (`share_prefixes`, on by default): segments whose tokens before
   the first trainable one are identical, routing included (a GRPO group's copies
   of one prompt), pack that prefix once; each segment's remainder is a "tail" that
   attends to it (`PackedStep.prefix_of`, the model's `prefix_of`). The logits are
   those of the flat packing up to summation order, and the prefix's rows get the
   sum of the gradients its copies would get; only the forward and backward of the
   repeated prompt tokens are saved.
6. A packed sequence ends before its last trainable token: that token is a target, and
   as an input it would only predict the token after it, which nothing trains. So the
   last sampled token of a trajectory (which the engine never feeds back and records no
   routing for) and any template tokens after it are not packed. A shared prefix is kept
   whole: its last row predicts its tails' first tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..schema import DecodedBatch, batch_records
from ..schema import Segment, Trajectory
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
    prefix_of: list[int] | None = None
    """Per packed sequence, the earlier sequence whose tokens it continues (-1: none); None when nothing is shared."""
    unpacked_tail_tokens: int = 0
    """Segment tokens left out after each sequence's last input row (see the module docstring, 6)."""

    @property
    def num_tokens(self) -> int:
        """Packed tokens: what the forward pass computes (a shared prefix counts once)."""
        return int(self.input_ids_T.shape[0])

    def to(self, device: torch.device) -> PackedStep:
        """The same step with its tensors on `device` (the trainer rank's GPU); itself when already there."""
        if self.input_ids_T.device == device:
            return self
        move = {name: getattr(self, name).to(device) for name in
                ("input_ids_T", "logit_rows_R", "targets_R", "rollout_logprobs_R", "sequence_R", "advantages_N")}
        routing = None if self.routing_TLK is None else self.routing_TLK.to(device)
        return dataclasses.replace(self, routing_TLK=routing, **move)

    @property
    def source_tokens(self) -> int:
        """Tokens of the packed segments before sharing (what the step trains on).

        A shared prefix is packed once as a sequence of its own, and every tail's segment
        holds it; the tokens after each sequence's last input row count too.
        """
        if self.prefix_of is None:
            return self.num_tokens + self.unpacked_tail_tokens
        heads = {p for p in self.prefix_of if p >= 0}
        repeated = sum(self.seq_lens[p] for p in self.prefix_of if p >= 0)
        return self.num_tokens - sum(self.seq_lens[h] for h in heads) + repeated + self.unpacked_tail_tokens


def trajectories_of(batches: Sequence[DecodedBatch]) -> dict[str, Trajectory]:
    out: dict[str, Trajectory] = {}
    for decoded in batches:
        for trajectory in batch_records(decoded):
            out[trajectory.trajectory_id] = trajectory
    return out


@dataclass(frozen=True, slots=True)
class _Piece:
    """A run of one segment's tokens [start, end) whose trainable tokens it predicts; its
    packed sequence is [start, inputs_end)."""

    segment: Segment
    trajectory: int
    start: int
    end: int
    routing: np.ndarray | None
    targets: np.ndarray
    """The run's trainable token indices (into the segment)."""

    @property
    def inputs_end(self) -> int:
        """End of the rows the run needs as input: up to its last target, exclusive (module
        docstring, 6), and at least one row. A run without targets (a shared prefix) keeps
        every token: its last row predicts its tails' first tokens."""
        return max(self.start + 1, int(self.targets[-1])) if self.targets.size else self.end


def pack_step(
    trajectories: dict[str, Trajectory],
    advantages: GroupAdvantages,
    *,
    layers: int,
    top_k: int,
    replay: bool = True,
    loss_scale: float = 1.0,
    share_prefixes: bool = True,
) -> PackedStep:
    """Packs the trajectories that `advantages` selected, in its order."""
    segments: list[tuple[int, Segment, np.ndarray | None, np.ndarray]] = []
    for n, trajectory_id in enumerate(advantages.trajectory_ids):
        for segment in trajectories[trajectory_id].segments:
            if segment.token_ids.size == 0:
                continue
            trainable = np.flatnonzero(segment.loss_mask)
            if trainable.size and trainable[0] == 0:
                raise PackingError(
                    f"trajectory {trajectory_id!r} segment {segment.segment_id!r} starts with a trainable token; "
                    "nothing precedes it to predict it from"
                )
            routing = None
            if replay and segment.routing is not None:
                routing = segment.routing.reshape(segment.token_ids.size, layers, top_k).astype(np.int64)
                routing[segment.routing_recorded == 0] = UNRECORDED
            segments.append((n, segment, routing, trainable))
    if replay and any(r is not None for _, _, r, _ in segments) and any(r is None for _, _, r, _ in segments):
        raise PackingError("some segments carry routing and others do not; a batch must be all MoE or all dense")

    # Segments sharing their untrainable head (tokens and routing before the first trainable
    # token) pack that head once; each then continues as a tail.
    heads: dict[tuple[int, bytes, bytes], list[int]] = {}
    if share_prefixes:
        for i, (_, segment, routing, trainable) in enumerate(segments):
            if trainable.size == 0:
                continue
            f = int(trainable[0])
            key = (f, segment.token_ids[:f].tobytes(), b"" if routing is None else routing[:f].tobytes())
            heads.setdefault(key, []).append(i)
    shared = [members for members in heads.values() if len(members) > 1]
    head_of = {i: g for g, members in enumerate(shared) for i in members}

    leading: list[_Piece] = []
    head_index: list[int] = []  # packed sequence of each shared group's head
    for members in shared:
        n, segment, routing, trainable = segments[members[0]]
        head_index.append(len(leading))
        leading.append(_Piece(segment, n, 0, int(trainable[0]), routing, trainable[:0]))
    for i, (n, segment, routing, trainable) in enumerate(segments):
        if i not in head_of:
            leading.append(_Piece(segment, n, 0, segment.token_ids.size, routing, trainable))
    tails: list[tuple[_Piece, int]] = []
    for i, (n, segment, routing, trainable) in enumerate(segments):
        if i in head_of:
            piece = _Piece(segment, n, int(trainable[0]), segment.token_ids.size, routing, trainable)
            tails.append((piece, head_index[head_of[i]]))

    ids, routing_parts, rows, targets, rollout, sequence, lens = [], [], [], [], [], [], []
    offsets: list[int] = []
    offset = 0
    unpacked = 0
    for piece in [*leading, *(t for t, _ in tails)]:
        offsets.append(offset)
        segment = piece.segment
        end = piece.inputs_end
        ids.append(segment.token_ids[piece.start : end])
        lens.append(end - piece.start)
        if piece.routing is not None:
            routing_parts.append(piece.routing[piece.start : end])
        offset += end - piece.start
        unpacked += piece.end - end
    prefix_of = [-1] * len(leading) + [head for _, head in tails]

    def add_targets(piece: _Piece, row_of_first: int | None, own_offset: int) -> None:
        segment = piece.segment
        trainable = piece.targets
        if trainable.size == 0:
            return
        # Token t is predicted by the row of token t - 1; a tail's first token by its head's last row.
        predictor = own_offset + trainable - 1 - piece.start
        if row_of_first is not None:
            predictor = np.where(trainable == piece.start, row_of_first, predictor)
        rows.append(predictor)
        targets.append(segment.token_ids[trainable])
        rollout.append(segment.logprobs[trainable])
        sequence.append(np.full(trainable.size, piece.trajectory, dtype=np.int64))

    for k, piece in enumerate(leading):
        add_targets(piece, None, offsets[k])
    for k, (piece, head) in enumerate(tails):
        add_targets(piece, offsets[head] + lens[head] - 1, offsets[len(leading) + k])

    def cat(parts: list[np.ndarray], dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.concatenate(parts)).to(dtype) if parts else torch.zeros(0, dtype=dtype)

    return PackedStep(
        input_ids_T=cat(ids, torch.int64),
        seq_lens=lens,
        routing_TLK=cat(routing_parts, torch.int64) if replay and routing_parts else None,
        logit_rows_R=cat(rows, torch.int64),
        targets_R=cat(targets, torch.int64),
        rollout_logprobs_R=cat(rollout, torch.float32),
        sequence_R=cat(sequence, torch.int64),
        advantages_N=torch.from_numpy(advantages.advantages.copy()),
        trajectory_ids=list(advantages.trajectory_ids),
        loss_scale=loss_scale,
        prefix_of=prefix_of if tails else None,
        unpacked_tail_tokens=unpacked,
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
