"""The training job's configuration: one typed object, built here from defaults, a TOML file and flags.

    defaults (the dataclasses below)  <  --config FILE.toml  <  command-line flags

Both entry points (`python -m lego_rl.trainer`, `python -m lego_rl.cluster.train`) call
`parse_job`, so a flag means the same thing in both and lands in the same field. The file
has one table per section, with the field names below:

    [model]      path
    [source]     spool | receive | toy_steps, receiver_spool, handover
    [checkpoint] dir
    [training]   loss, loss_aggregation, lr, warmup_steps, trainable_parameters, max_steps, max_staleness,
                 replay_routing, log, threads
    [weights]    dir, sglang, vllm, engine
    [cluster]    ray_address, engines, trainer_ranks, gpus_per_rank, cpus_per_rank, backend, engine_dtype,
                 engine_compile_decode
    [fleet]      rollout_args, spool_root, producer_id, max_restarts, worker_cpus, node_resource, lego, log_dir
    [hardware]   nodes, cpus_per_node, gpus_per_node, gpu_memory_gib   (the cluster the job is planned for)

The Ray entry point also takes `-- ROLLOUT-ARGS` after its own flags: the `lego rollout`
arguments of the rollout fleet the job starts itself (`fleet.rollout_args`; given after `--`
they replace the file's list).

An unknown table or key, a value of the wrong type, or a key the entry point does not use
is an error naming the file and the key: a setting that is silently ignored is worse than
none, and so is a combination that cannot run (a fleet without a receiver, a rollout argument
the fleet sets itself). Mistakes on the command line are usage errors (argparse, exit 2);
mistakes in the file are `JobConfigError` (one line and exit 1 through lego_rl/entry.py).
"""

from __future__ import annotations

import argparse
import re
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, Union

from ..engine import EngineConfig
from .driver import LoopConfig
from .step import StepConfig

Entry = Literal["local", "cluster"]
"""Which entry point parses: the single-process trainer or the Ray application."""

_STEP = StepConfig()


class JobConfigError(ValueError):
    """A config file (or the flags with it) does not describe a job; names the file and the key."""

    hint = "fix the key named (see python-bridge/lego_rl/trainer/job.py for every key and its type)"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConfig:
    path: Path
    """HF-layout model directory (config.json + safetensors)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceConfig:
    """Where batches come from: exactly one of spool, receive, toy_steps."""

    spool: Path | None = None
    """Folder of Trajectory .arrow batches."""
    receive: str | None = None
    """Bind the data-plane receiver here, e.g. tcp://127.0.0.1:5555."""
    toy_steps: int | None = None
    """Train on-policy on the built-in toy task for N steps (Ray engines; cluster only)."""
    receiver_spool: Path = Path("var/receiver")
    """The receiver's durable spool."""
    handover: Literal["spool", "consumer"] = "spool"
    """What a batch's ack waits for: the receiver's spool copy or this trainer's checkpoint (docs/transport.md)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointConfig:
    dir: Path
    """Checkpoint folder; training resumes from it."""
    keep: int = 2
    """Newest checkpoints kept (0: all); the trainer writes one after every step."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingConfig:
    loss: Literal["gspo", "gspo_token", "grpo"] = _STEP.loss
    loss_aggregation: Literal["sequence_mean", "token_sum_norm"] = _STEP.loss_aggregation
    """sequence_mean (the papers'), or token_sum_norm: every token weighs the same (no length bias)."""
    lr: float = _STEP.lr
    warmup_steps: int = _STEP.warmup_steps
    """Linear learning-rate warm-up over the first N updates (0: none)."""
    trainable_parameters: str | None = _STEP.trainable_parameters
    """Regular expression: only parameters whose name it matches are updated (e.g. "^model\\.norm\\."); None: all."""
    max_steps: int | None = None
    max_staleness: int | None = None
    """Exclude rollouts sampled by weights more than this many versions old (0: on-policy only)."""
    replay_routing: bool = _STEP.replay_routing
    """Replay recorded routing; off only for comparison (local only)."""
    log: Path | None = None
    """Append one JSON line of metrics per step (default: stdout)."""
    threads: int = 2
    """torch threads of the single-process trainer (local only)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WeightSyncConfig:
    """Publishing each version to external inference servers (cluster only; docs/weight-sync.md)."""

    dir: Path | None = None
    """Write every published version to DIR/v<N>/ (HF layout) for external inference servers."""
    sglang: tuple[str, ...] = ()
    vllm: tuple[str, ...] = ()
    engine: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterConfig:
    """Ray placement (cluster only)."""

    ray_address: str | None = None
    engines: int = 1
    """Engines the job starts: on-policy replicas with source.toy_steps; with a rollout fleet, ZeroMQ engine
    servers the workers sample from (0: the rollout arguments name their own --engine)."""
    trainer_ranks: int = 1
    """Trainer ranks; the routed experts are sharded across all of them (expert-parallel size)."""
    gpus_per_rank: int = 0
    """GPUs in each trainer rank's placement-group bundle; above 0 the rank trains on CUDA (backend nccl)."""
    cpus_per_rank: int = 1
    """CPUs in each trainer rank's bundle (its torch threads)."""
    backend: Literal["gloo", "nccl"] = "gloo"
    engine_dtype: Literal["float32", "bfloat16"] = "float32"
    engine_compile_decode: bool = False
    """The job's engines run pure decode steps as one compiled graph (EngineConfig.compile_decode): faster steps
    after a one-off compile of seconds per engine process."""

    def engine_config(self) -> EngineConfig:
        """What every engine this job starts runs with."""
        return EngineConfig(dtype=self.engine_dtype, compile_decode=self.engine_compile_decode)


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetConfig:
    """The rollout fleet the Ray job starts itself (cluster only; needs source.receive): one supervised
    `lego rollout` worker per live Ray node, shipping to this job's receiver and sampling from the job's
    engine servers (lego_rl/cluster/job_fleet.py). It runs when rollout arguments are given."""

    rollout_args: tuple[str, ...] = ()
    """`lego rollout` arguments (--tasks, --harness, --group-size, ...); the fleet adds --trainer, --producer-id,
    --spool-dir and, with cluster.engines > 0, --engine and --model-dir itself."""
    spool_root: Path = Path("var/rollout-spool")
    """Worker i spools to SPOOL_ROOT/PRODUCER_ID-i on its node (its run journal too, so a restart resumes)."""
    producer_id: str = "rollout"
    """Worker i is PRODUCER_ID-i (its batch and trajectory ids)."""
    max_restarts: int = 20
    """Restarts of a worker that exits non-zero, with back-off; one more failure ends the job with an error."""
    worker_cpus: int = 1
    """Ray CPUs each worker's supervisor holds (its sandboxes use the node's Docker, not Ray's CPUs)."""
    node_resource: str | None = None
    """Only nodes offering this Ray resource run a worker (`ray start --resources '{"rollout": 1}'` on the Docker
    nodes), so GPU nodes need no Docker; default: every live node."""
    lego: Path | None = None
    """The `lego` entry point on every node (default: this checkout's ts/bin/lego)."""
    log_dir: Path | None = None
    """Keep each worker's stderr in LOG_DIR/rollout-<restart>.log on its node (default: only its tail, in errors)."""

    @property
    def enabled(self) -> bool:
        return bool(self.rollout_args)


# Flags the fleet sets on every worker: given by hand they would fight the fleet's own.
FLEET_SETS_ALWAYS = ("--trainer", "--producer-id", "--spool-dir")
FLEET_SETS_WITH_ENGINES = ("--engine", "--model-dir")


@dataclass(frozen=True, kw_only=True, slots=True)
class HardwareConfig:
    """The cluster a job is planned for (cluster only): `lego check --config` fits the placement
    groups and the per-GPU memory into it without a cluster, and the Ray entry point refuses to
    start on a cluster with fewer GPUs than declared. Omit the table to skip both."""

    nodes: int | None = None
    cpus_per_node: int | None = None
    gpus_per_node: int = 0
    gpu_memory_gib: float | None = None
    """Memory of one GPU, e.g. 80 for an H100 SXM, 141 for an H200."""


@dataclass(frozen=True, kw_only=True, slots=True)
class JobConfig:
    model: ModelConfig
    source: SourceConfig
    checkpoint: CheckpointConfig
    training: TrainingConfig = TrainingConfig()
    weights: WeightSyncConfig = WeightSyncConfig()
    cluster: ClusterConfig = ClusterConfig()
    fleet: FleetConfig = FleetConfig()
    hardware: HardwareConfig = HardwareConfig()

    def step_config(self) -> StepConfig:
        return StepConfig(loss=self.training.loss, loss_aggregation=self.training.loss_aggregation, lr=self.training.lr,
                          warmup_steps=self.training.warmup_steps, trainable_parameters=self.training.trainable_parameters,
                          replay_routing=self.training.replay_routing)

    def loop_config(self) -> LoopConfig:
        return LoopConfig(checkpoint_dir=self.checkpoint.dir, keep_checkpoints=self.checkpoint.keep, max_steps=self.training.max_steps,
                          max_staleness=self.training.max_staleness)


_SECTION_TYPES = {"model": ModelConfig, "source": SourceConfig, "checkpoint": CheckpointConfig,
                  "training": TrainingConfig, "weights": WeightSyncConfig, "cluster": ClusterConfig,
                 "fleet": FleetConfig, "hardware": HardwareConfig}
_SOURCE_KINDS = ("source.spool", "source.receive", "source.toy_steps")


@dataclass(frozen=True, kw_only=True, slots=True)
class _Flag:
    key: str
    """`section.field` it sets."""
    flag: str
    scope: Literal["both", Entry] = "both"
    help: str | None = None
    metavar: str | None = None


# The one flag definition both entry points parse with; the order is --help's.
FLAGS: tuple[_Flag, ...] = (
    _Flag(key="model.path", flag="--model", help="HF-layout model directory (config.json + safetensors)"),
    _Flag(key="checkpoint.dir", flag="--checkpoints", help="checkpoint folder; training resumes from it"),
    _Flag(key="checkpoint.keep", flag="--keep-checkpoints", metavar="N",
          help="newest checkpoints kept (default 2; 0: all): one is written after every step"),
    _Flag(key="source.spool", flag="--spool", help="train on the Trajectory .arrow batches in this folder"),
    _Flag(key="source.toy_steps", flag="--toy-steps", scope="cluster", metavar="N",
          help="train on-policy on the built-in toy task for N steps"),
    _Flag(key="source.receive", flag="--receive", metavar="ADDRESS",
          help="bind the data-plane receiver here (e.g. tcp://127.0.0.1:5555) and train on what rollout workers send"),
    _Flag(key="source.receiver_spool", flag="--receiver-spool", help="the receiver's durable spool (default var/receiver)"),
    _Flag(key="source.handover", flag="--handover",
          help="what a batch's ack waits for: the receiver's spool copy (kept for notebooks) or this "
               "trainer's checkpoint (no receiver copy, less CPU; docs/transport.md)"),
    _Flag(key="cluster.ray_address", flag="--ray-address", scope="cluster",
          help="join this Ray cluster (default: start a local one)"),
    _Flag(key="cluster.engines", flag="--engines", scope="cluster",
          help="engines the job starts: on-policy replicas (--toy-steps) or the rollout fleet's engine servers "
               "(0: the rollout arguments name their own --engine)"),
    _Flag(key="cluster.trainer_ranks", flag="--trainer-ranks", scope="cluster",
          help="trainer ranks; experts are sharded across them"),
    _Flag(key="cluster.gpus_per_rank", flag="--gpus-per-rank", scope="cluster",
          help="GPUs per trainer rank (0: CPU ranks); ranks with GPUs train on CUDA over NCCL"),
    _Flag(key="cluster.cpus_per_rank", flag="--cpus-per-rank", scope="cluster", help="CPUs per trainer rank"),
    _Flag(key="cluster.backend", flag="--backend", scope="cluster", help="torch.distributed backend for expert parallelism"),
    _Flag(key="cluster.engine_dtype", flag="--engine-dtype", scope="cluster"),
    _Flag(key="cluster.engine_compile_decode", flag="--engine-compile-decode", scope="cluster",
          help="run the engines' decode steps as one compiled graph (seconds to compile per engine, then faster steps)"),
    _Flag(key="training.max_steps", flag="--max-steps"),
    _Flag(key="training.max_staleness", flag="--max-staleness", metavar="VERSIONS",
          help="exclude rollouts sampled by weights more than this many versions old (0: on-policy only)"),
    _Flag(key="training.log", flag="--log", help="append one JSON line of metrics per step (default: stdout)"),
    _Flag(key="training.loss", flag="--loss"),
    _Flag(key="training.loss_aggregation", flag="--loss-aggregation",
          help="sequence_mean (the papers') or token_sum_norm (every token weighs the same: no length bias)"),
    _Flag(key="training.lr", flag="--lr"),
    _Flag(key="training.warmup_steps", flag="--warmup-steps", metavar="N",
          help="raise the learning rate linearly over the first N updates (default 0: full rate at once)"),
    _Flag(key="training.trainable_parameters", flag="--trainable-parameters", metavar="REGEX",
          help="update only the parameters whose name matches REGEX (default: all; e.g. '^model\\.norm\\.': "
               "the final norm's gains alone)"),
    _Flag(key="training.replay_routing", flag="--no-replay", scope="local",
          help="do not replay recorded routing (for comparison only)"),
    _Flag(key="training.threads", flag="--threads", scope="local"),
    _Flag(key="weights.dir", flag="--weights-dir", scope="cluster",
          help="write every published version to DIR/v<N>/ (HF layout) for external inference servers"),
    _Flag(key="weights.sglang", flag="--sync-sglang", scope="cluster", metavar="URL",
          help="SGLang server to load each version from --weights-dir (repeatable)"),
    _Flag(key="weights.vllm", flag="--sync-vllm", scope="cluster", metavar="URL",
          help="vLLM server (dev mode + LegoWeightReloader extension) to load each version (repeatable)"),
    _Flag(key="weights.engine", flag="--sync-engine", scope="cluster", metavar="ADDRESS",
          help="ZeroMQ engine server (python -m lego_rl.engine, e.g. tcp://HOST:5556) to load each version (repeatable)"),
    _Flag(key="fleet.spool_root", flag="--fleet-spool-root", scope="cluster", metavar="DIR",
          help="rollout worker i spools to DIR/PRODUCER_ID-i on its node (default var/rollout-spool)"),
    _Flag(key="fleet.producer_id", flag="--fleet-producer-id", scope="cluster", metavar="ID",
          help="rollout worker i is ID-i (default rollout)"),
    _Flag(key="fleet.max_restarts", flag="--fleet-max-restarts", scope="cluster", metavar="N",
          help="restarts of a failing rollout worker before the job ends with an error (default 20)"),
    _Flag(key="fleet.worker_cpus", flag="--fleet-worker-cpus", scope="cluster", metavar="N",
          help="Ray CPUs each rollout worker's supervisor holds (default 1)"),
    _Flag(key="fleet.node_resource", flag="--fleet-node-resource", scope="cluster", metavar="NAME",
          help="only nodes offering this Ray resource run a rollout worker (default: every live node)"),
    _Flag(key="fleet.lego", flag="--fleet-lego", scope="cluster", metavar="PATH",
          help="the lego entry point on every node (default: this checkout's ts/bin/lego)"),
    _Flag(key="fleet.log_dir", flag="--fleet-log-dir", scope="cluster", metavar="DIR",
          help="keep each rollout worker's stderr under DIR on its node"),
)


def _field_type(key: str) -> Any:
    section, name = key.split(".")
    return typing.get_type_hints(_SECTION_TYPES[section])[name]


def _field_default(key: str) -> Any:
    section, name = key.split(".")
    return next(f.default for f in fields(_SECTION_TYPES[section]) if f.name == name)


def _unoptional(kind: Any) -> Any:
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (Union, types.UnionType) and type(None) in args:
        return next(a for a in args if a is not type(None))
    return kind


def _uses(key: str, entry: Entry) -> bool:
    if key.startswith(("hardware.", "fleet.")):  # the Ray entry point's alone (hardware: a file-only table)
        return entry == "cluster"
    flag = next((f for f in FLAGS if f.key == key), None)
    return flag is None or flag.scope in ("both", entry)


def job_parser(entry: Entry, *, prog: str, description: str | None) -> argparse.ArgumentParser:
    """The entry point's parser: --config plus the FLAGS its entry uses; only flags given land in the namespace."""
    epilog = ("-- ROLLOUT-ARGS   after the flags: the `lego rollout` arguments of the rollout fleet this job\n"
              "                 starts itself, one worker per Ray node [fleet.rollout_args]") if entry == "cluster" else None
    parser = argparse.ArgumentParser(prog=prog, description=description, argument_default=argparse.SUPPRESS, epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, metavar="FILE.toml",
                        help="job configuration file (tables as in lego_rl/trainer/job.py); flags override it")
    sources = parser.add_mutually_exclusive_group()
    for flag in FLAGS:
        if flag.scope not in ("both", entry):
            continue
        kind = _unoptional(_field_type(flag.key))
        target = sources if flag.key in _SOURCE_KINDS else parser
        # The help names the config key, so the file's vocabulary is one --help away.
        options: dict[str, Any] = {"dest": flag.key, "help": f"{flag.help} [{flag.key}]" if flag.help else f"[{flag.key}]"}
        metavar = flag.metavar or flag.flag.removeprefix("--").upper().replace("-", "_")
        if kind is bool:
            # A bool flag flips its field's default: --no-replay turns one off, --engine-compile-decode one on.
            options["action"] = "store_false" if _field_default(flag.key) else "store_true"
        elif typing.get_origin(kind) is tuple:
            options |= {"action": "append", "metavar": metavar}
        elif typing.get_origin(kind) is Literal:
            options["choices"] = typing.get_args(kind)
        else:
            options |= {"type": kind, "metavar": metavar}
        target.add_argument(flag.flag, **options)
    return parser


def _checked(path: Path, key: str, value: Any) -> Any:
    """The TOML value as the field's type, or a JobConfigError naming file and key."""
    kind = _unoptional(_field_type(key))
    origin = typing.get_origin(kind)

    def wrong(expected: str) -> JobConfigError:
        return JobConfigError(f"{path}: {key} = {value!r}: expected {expected}")

    if origin is Literal:
        if value not in typing.get_args(kind):
            raise wrong("one of " + ", ".join(repr(a) for a in typing.get_args(kind)))
        return value
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise wrong("a list of strings")
        return tuple(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise wrong("true or false")
        return value
    if kind is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise wrong("an integer")
        return value
    if kind is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise wrong("a number")
        return float(value)
    if not isinstance(value, str):
        raise wrong("a string")
    return Path(value) if kind is Path else value


def read_job_file(path: Path, entry: Entry) -> dict[str, Any]:
    """`{"section.field": value}` from a TOML job file, every key checked."""
    try:
        with open(path, "rb") as handle:
            tables = tomllib.load(handle)
    except FileNotFoundError:
        raise JobConfigError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as error:
        raise JobConfigError(f"{path}: not valid TOML: {error}") from None
    values: dict[str, Any] = {}
    for section, table in tables.items():
        if section not in _SECTION_TYPES:
            raise JobConfigError(f"{path}: unknown table [{section}] (known: {', '.join(_SECTION_TYPES)})")
        if not isinstance(table, dict):
            raise JobConfigError(f"{path}: {section} must be a table ([{section}]), not a value")
        known = [f.name for f in fields(_SECTION_TYPES[section])]
        for name, value in table.items():
            key = f"{section}.{name}"
            if name not in known:
                raise JobConfigError(f"{path}: unknown key {key} (known in [{section}]: {', '.join(known)})")
            if not _uses(key, entry):
                other = "python -m lego_rl.cluster.train" if entry == "local" else "python -m lego_rl.trainer"
                raise JobConfigError(f"{path}: {key} is used only by {other}; remove it for this entry point")
            values[key] = _checked(path, key, value)
    return values


def build_job(values: Mapping[str, Any], *, origin: str) -> JobConfig:
    """The JobConfig from `section.field` values over the defaults; `origin` names where they came from."""
    for required, flag in (("model.path", "--model"), ("checkpoint.dir", "--checkpoints")):
        if required not in values:
            raise JobConfigError(f"{origin}: {required} is required (give {flag} or [{required.split('.')[0]}] "
                                 f"{required.split('.')[1]} in --config)")
    chosen = [k for k in _SOURCE_KINDS if values.get(k) is not None]
    if len(chosen) != 1:
        raise JobConfigError(f"{origin}: give exactly one source (source.spool/--spool, source.receive/--receive"
                             f" or source.toy_steps/--toy-steps), got {', '.join(chosen) or 'none'}")
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTION_TYPES}
    for key, value in values.items():
        section, name = key.split(".")
        sections[section][name] = value
    job = JobConfig(**{name: _SECTION_TYPES[name](**kwargs) for name, kwargs in sections.items()})  # type: ignore[arg-type]
    sync = job.weights
    if (sync.sglang or sync.vllm or sync.engine) and sync.dir is None:
        raise JobConfigError(f"{origin}: --sync-sglang/--sync-vllm/--sync-engine (weights.sglang/vllm/engine) load "
                             "weights from disk: give --weights-dir (weights.dir) on a path the servers see")
    _check_training(job.training, origin)
    _check_fleet(job, {k for k in values if k.startswith("fleet.")}, origin)
    return job


def _check_training(training: TrainingConfig, origin: str) -> None:
    # Checked here, before any rank starts: a pattern error inside a Ray actor reads as a crashed rank.
    if training.warmup_steps < 0:
        raise JobConfigError(f"{origin}: training.warmup_steps = {training.warmup_steps}: expected 0 or more")
    if training.trainable_parameters is not None:
        try:
            re.compile(training.trainable_parameters)
        except re.error as e:
            raise JobConfigError(f"{origin}: training.trainable_parameters {training.trainable_parameters!r} is not a "
                                 f"regular expression: {e}") from e


def _check_fleet(job: JobConfig, given: set[str], origin: str) -> None:
    """Combinations that cannot run: each names what to give or drop."""
    fleet = job.fleet
    if not fleet.enabled:
        others = sorted(given - {"fleet.rollout_args"})
        if others:
            raise JobConfigError(f"{origin}: {', '.join(others)} set but no rollout arguments: give the `lego rollout` "
                                 "arguments after -- (or fleet.rollout_args), or drop the fleet settings")
        return
    if job.source.receive is None:
        raise JobConfigError(f"{origin}: the rollout fleet ships to this job's receiver: give --receive ADDRESS "
                             "(source.receive), e.g. tcp://0.0.0.0:5555")
    reserved = FLEET_SETS_ALWAYS + (FLEET_SETS_WITH_ENGINES if job.cluster.engines > 0 else ())
    for arg in fleet.rollout_args:
        name = arg.split("=", 1)[0]
        if name in reserved:
            why = ("the fleet's engine servers (cluster.engines > 0) are each worker's --engine; use --engines 0 "
                   "to name your own" if name in FLEET_SETS_WITH_ENGINES else "the fleet sets it on every worker")
            raise JobConfigError(f"{origin}: rollout argument {name}: {why}")
    if job.cluster.engines < 0:
        raise JobConfigError(f"{origin}: cluster.engines = {job.cluster.engines}: expected 0 or more")
    if job.cluster.engines > 0 and job.weights.dir is None:
        raise JobConfigError(f"{origin}: the fleet's engine servers load each new version from disk: give --weights-dir "
                             "(weights.dir) on a path every engine's node sees")
    if fleet.max_restarts < 0 or fleet.worker_cpus < 1:
        raise JobConfigError(f"{origin}: fleet.max_restarts must be >= 0 and fleet.worker_cpus >= 1 "
                             f"(got {fleet.max_restarts}, {fleet.worker_cpus})")


def parse_job(argv: Sequence[str], entry: Entry, *, prog: str, description: str | None = None) -> JobConfig:
    """The job an entry point was asked to run: defaults < --config FILE < flags."""
    parser = job_parser(entry, prog=prog, description=description)
    argv = list(argv)
    own, rollout_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, None)
    if rollout_args is not None and entry != "cluster":
        parser.error("arguments after -- are a rollout fleet's; only python -m lego_rl.cluster.train starts one")
    given = vars(parser.parse_args(own))
    config_file: Path | None = given.pop("config", None)
    values = read_job_file(config_file, entry) if config_file is not None else {}
    if any(k in given for k in _SOURCE_KINDS):  # a source flag replaces the file's source, not joins it
        values = {k: v for k, v in values.items() if k not in _SOURCE_KINDS}
    values |= {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()}
    if rollout_args:  # after --, they replace the file's list (as any flag replaces its key)
        values["fleet.rollout_args"] = tuple(rollout_args)
    try:
        return build_job(values, origin=str(config_file) if config_file is not None else "flags")
    except JobConfigError as error:
        if config_file is None:
            parser.error(str(error).removeprefix("flags: "))  # a flag mistake is a usage error, as argparse's own
        raise


__all__ = ["CheckpointConfig", "ClusterConfig", "FleetConfig", "HardwareConfig", "JobConfig", "JobConfigError", "ModelConfig", "SourceConfig",
           "TrainingConfig", "WeightSyncConfig", "build_job", "job_parser", "parse_job", "read_job_file"]
