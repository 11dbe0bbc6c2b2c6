"""GSPO trainer: advantages, losses, mismatch metrics, the job config (Ray wiring lives in lego_rl.cluster)."""

from .advantages import GroupAdvantages, RolloutOutcome, group_advantages
from .losses import ClippedSurrogateLoss, GrpoLoss, GspoLoss, GspoTokenLoss, LossInputs, MismatchCorrection
from .job import JobConfig, JobConfigError, parse_job
from .mismatch import mismatch_metrics, routing_disagreement

__all__ = [
    "ClippedSurrogateLoss",
    "GroupAdvantages",
    "GrpoLoss",
    "GspoLoss",
    "GspoTokenLoss",
    "JobConfig",
    "JobConfigError",
    "LossInputs",
    "MismatchCorrection",
    "RolloutOutcome",
    "group_advantages",
    "mismatch_metrics",
    "parse_job",
    "routing_disagreement",
]
