"""GSPO trainer: advantages, losses, mismatch metrics, the job config (Ray wiring lives in lego_rl.cluster)."""

from .advantages import GroupAdvantages, RolloutOutcome, exclusion_reason, group_advantages
from .checkpoint import CheckpointError, CheckpointStore, TrainerPosition
from .driver import LocalPolicy, LoopConfig, outcome_of, train
from .job import ClusterConfig, HardwareConfig, JobConfig, JobConfigError, parse_job
from .losses import ClippedSurrogateLoss, GrpoLoss, GspoLoss, GspoTokenLoss, LossInputs, MismatchCorrection
from .mismatch import mismatch_metrics, routing_disagreement
from .packing import pack_step, split_for_ranks
from .plan import check_job_file, parameter_counts, trainer_bundles
from .sources import BatchSource, ReceiverSource, SpoolFolderSource, TrainingBatch
from .step import PolicyUpdater, StepConfig, trainable_parameters

__all__ = [
    "BatchSource",
    "CheckpointError",
    "ClusterConfig",
    "CheckpointStore",
    "ClippedSurrogateLoss",
    "GroupAdvantages",
    "GrpoLoss",
    "GspoLoss",
    "GspoTokenLoss",
    "HardwareConfig",
    "JobConfig",
    "JobConfigError",
    "LocalPolicy",
    "LoopConfig",
    "LossInputs",
    "MismatchCorrection",
    "PolicyUpdater",
    "trainable_parameters",
    "ReceiverSource",
    "RolloutOutcome",
    "SpoolFolderSource",
    "StepConfig",
    "TrainerPosition",
    "TrainingBatch",
    "check_job_file",
    "exclusion_reason",
    "group_advantages",
    "mismatch_metrics",
    "outcome_of",
    "pack_step",
    "parameter_counts",
    "parse_job",
    "routing_disagreement",
    "split_for_ranks",
    "train",
    "trainer_bundles",
]
