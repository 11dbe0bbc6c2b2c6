"""One typed job configuration (lego_rl/trainer/job.py): both entry points, one flag definition,
defaults < --config FILE.toml < flags, and a file mistake named by file and key (exit 1, one line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lego_rl.trainer import JobConfigError, parse_job
from lego_rl.trainer.job import JobConfig

REPO = Path(__file__).resolve().parents[3]
COMMON = ["--model", "m", "--checkpoints", "ckpt", "--receive", "tcp://127.0.0.1:5555", "--receiver-spool", "rs",
          "--handover", "consumer", "--max-steps", "7", "--max-staleness", "0", "--log", "log.jsonl",
          "--loss", "grpo", "--lr", "0.002"]


def _local(argv: list[str]) -> JobConfig:
    return parse_job(argv, "local", prog="python -m lego_rl.trainer")


def _cluster(argv: list[str]) -> JobConfig:
    return parse_job(argv, "cluster", prog="python -m lego_rl.cluster.train")


def test_the_same_flags_give_the_same_config_from_both_entry_points():
    local, cluster = _local(COMMON), _cluster(COMMON)
    assert local == cluster
    assert local.model.path == Path("m") and local.checkpoint.dir == Path("ckpt")
    assert local.source.receive == "tcp://127.0.0.1:5555" and local.source.handover == "consumer"
    assert local.loop_config().max_steps == 7 and local.loop_config().max_staleness == 0
    step = local.step_config()
    assert (step.loss, step.lr, step.replay_routing) == ("grpo", 0.002, True)


def test_defaults_match_what_the_entry_points_used_before():
    job = _local(["--model", "m", "--checkpoints", "c", "--spool", "s"])
    assert job.source.receiver_spool == Path("var/receiver") and job.source.handover == "spool"
    assert (job.training.loss, job.training.threads, job.training.log) == ("gspo", 2, None)
    assert (job.cluster.engines, job.cluster.trainer_ranks, job.cluster.backend) == (1, 1, "gloo")


def test_flags_override_the_file_and_the_file_overrides_defaults(tmp_path: Path):
    config = tmp_path / "job.toml"
    config.write_text('[model]\npath = "from-file"\n[checkpoint]\ndir = "ck"\n[source]\nspool = "sp"\n'
                      '[training]\nlr = 0.5\nmax_steps = 3\n[cluster]\nengines = 4\n'
                      '[weights]\ndir = "w"\nvllm = ["http://a:1", "http://b:2"]\n')
    job = _cluster(["--config", str(config), "--lr", "0.25", "--receive", "tcp://127.0.0.1:1"])
    assert job.training.lr == 0.25  # flag beats file
    assert job.training.max_steps == 3 and job.cluster.engines == 4  # file beats default
    assert job.model.path == Path("from-file") and job.weights.vllm == ("http://a:1", "http://b:2")
    # A source flag replaces the file's source instead of joining it.
    assert job.source.receive == "tcp://127.0.0.1:1" and job.source.spool is None


def test_compiled_engine_decode_is_off_by_default_and_on_from_the_flag_or_the_file(tmp_path: Path):
    base = ["--model", "m", "--checkpoints", "c", "--spool", "s"]
    assert _cluster(base).cluster.engine_config().compile_decode is False
    flagged = _cluster([*base, "--engine-compile-decode", "--engine-dtype", "bfloat16"]).cluster.engine_config()
    assert (flagged.compile_decode, flagged.dtype) == (True, "bfloat16")
    config = tmp_path / "job.toml"
    config.write_text("[cluster]\nengine_compile_decode = true\n")
    assert _cluster(["--config", str(config), *base]).cluster.engine_compile_decode is True
    config.write_text('[cluster]\nengine_compile_decode = "yes"\n')
    with pytest.raises(JobConfigError, match="cluster.engine_compile_decode = 'yes'"):
        _cluster(["--config", str(config), *base])


@pytest.mark.parametrize(("body", "named"), [
    ('[source]\nspol = "x"\n', "unknown key source.spol"),
    ('[sources]\nspool = "x"\n', "unknown table [sources]"),
    ('[training]\nlr = "fast"\n', "training.lr = 'fast': expected a number"),
    ('[training]\nmax_steps = 2.5\n', "training.max_steps = 2.5: expected an integer"),
    ('[cluster]\nengines = true\n', "cluster.engines = True: expected an integer"),
    ('[source]\nhandover = "later"\n', "source.handover = 'later': expected one of 'spool', 'consumer'"),
    ('[weights]\nvllm = "http://a:1"\n', "weights.vllm = 'http://a:1': expected a list of strings"),
])
def test_a_bad_file_key_is_an_error_naming_file_and_key(tmp_path: Path, body: str, named: str):
    config = tmp_path / "job.toml"
    config.write_text(body)
    with pytest.raises(JobConfigError) as caught:
        _cluster(["--config", str(config), "--model", "m", "--checkpoints", "c", "--spool", "s"])
    assert str(caught.value).startswith(f"{config}: ") and named in str(caught.value)


def test_warm_up_and_trainable_parameters_reach_the_update_from_flags_and_file(tmp_path: Path):
    config = tmp_path / "job.toml"
    config.write_text('[training]\nwarmup_steps = 5\ntrainable_parameters = "^model\\\\.norm\\\\."\n')
    base = ["--model", "m", "--checkpoints", "c", "--spool", "s"]
    step = _local([*base, "--config", str(config)]).step_config()
    assert (step.warmup_steps, step.trainable_parameters) == (5, r"^model\.norm\.")
    step = _cluster([*base, "--config", str(config), "--warmup-steps", "0", "--trainable-parameters", "experts"]).step_config()
    assert (step.warmup_steps, step.trainable_parameters) == (0, "experts")


@pytest.mark.parametrize(("flags", "says"), [
    (["--warmup-steps", "-1"], "training.warmup_steps = -1: expected 0 or more"),
    (["--trainable-parameters", "layers.("], "training.trainable_parameters 'layers.(' is not a regular expression"),
])
def test_a_warm_up_or_trainable_pattern_that_cannot_run_is_a_usage_error_before_any_rank_starts(
        flags: list[str], says: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as caught:
        _cluster(["--model", "m", "--checkpoints", "c", "--spool", "s", *flags])
    assert caught.value.code == 2 and says in capsys.readouterr().err


def test_a_key_the_entry_point_does_not_use_is_an_error_not_ignored(tmp_path: Path):
    config = tmp_path / "job.toml"
    config.write_text("[cluster]\ntrainer_ranks = 2\n")
    with pytest.raises(JobConfigError, match="cluster.trainer_ranks is used only by python -m lego_rl.cluster.train"):
        _local(["--config", str(config), "--model", "m", "--checkpoints", "c", "--spool", "s"])


def test_flag_mistakes_stay_usage_errors(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as caught:
        _local(["--model", "m", "--checkpoints", "c"])
    assert caught.value.code == 2 and "exactly one source" in capsys.readouterr().err
    with pytest.raises(SystemExit) as caught:
        _local(["--model", "m", "--checkpoints", "c", "--spool", "s", "--toy-steps", "3"])  # cluster-only flag
    assert caught.value.code == 2


def test_the_entry_point_prints_one_line_and_exits_1_for_a_bad_file(tmp_path: Path):
    config = tmp_path / "job.toml"
    config.write_text('[training]\nloss = "ppo"\n')
    result = subprocess.run([sys.executable, "-m", "lego_rl.trainer", "--config", str(config), "--model", "m",
                             "--checkpoints", str(tmp_path / "ckpt"), "--spool", str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith("python -m lego_rl.trainer: JobConfigError: ") and str(config) in lines[0]
    assert "training.loss = 'ppo'" in lines[0]
    assert not (tmp_path / "ckpt").exists()  # nothing started, nothing written


def test_the_example_job_file_parses_for_the_ray_entry_point():
    job = _cluster(["--config", str(REPO / "examples" / "train-job.toml")])
    assert job.source.spool == Path("var/spool") and job.weights.engine == ("tcp://127.0.0.1:5556",)
    assert job.training.max_staleness == 1


FLEET = ["--model", "m", "--checkpoints", "c", "--receive", "tcp://0.0.0.0:5555", "--weights-dir", "w"]


def test_rollout_arguments_after_dashes_start_a_fleet_with_its_own_flags():
    job = _cluster([*FLEET, "--engines", "2", "--fleet-max-restarts", "3", "--fleet-producer-id", "box",
                    "--", "--tasks", "easy", "--harness", "reference", "--group-size", "2"])
    assert job.fleet.enabled and job.fleet.rollout_args == ("--tasks", "easy", "--harness", "reference", "--group-size", "2")
    assert (job.cluster.engines, job.fleet.max_restarts, job.fleet.producer_id) == (2, 3, "box")
    assert job.fleet.spool_root == Path("var/rollout-spool") and job.fleet.lego is None
    assert not _cluster(FLEET).fleet.enabled  # no rollout arguments, no fleet


def test_the_fleet_table_in_a_file_and_dashes_replace_its_list(tmp_path: Path):
    config = tmp_path / "job.toml"
    config.write_text('[fleet]\nrollout_args = ["--tasks", "easy", "--harness", "oracle"]\nworker_cpus = 2\n'
                      'spool_root = "/var/lib/spool"\n')
    job = _cluster(["--config", str(config), *FLEET])
    assert job.fleet.rollout_args == ("--tasks", "easy", "--harness", "oracle") and job.fleet.worker_cpus == 2
    assert job.fleet.spool_root == Path("/var/lib/spool")
    job = _cluster(["--config", str(config), *FLEET, "--", "--tasks", "builtin", "--harness", "oracle"])
    assert job.fleet.rollout_args == ("--tasks", "builtin", "--harness", "oracle") and job.fleet.worker_cpus == 2


@pytest.mark.parametrize(("argv", "named"), [
    (["--model", "m", "--checkpoints", "c", "--spool", "s", "--", "--tasks", "easy"],
     "the rollout fleet ships to this job's receiver: give --receive"),
    ([*FLEET, "--", "--tasks", "easy", "--trainer", "tcp://h:1"], "rollout argument --trainer: the fleet sets it"),
    ([*FLEET, "--", "--tasks", "easy", "--spool-dir=x"], "rollout argument --spool-dir: the fleet sets it"),
    ([*FLEET, "--", "--tasks", "easy", "--engine", "tcp://h:1"], "rollout argument --engine: the fleet's engine servers"),
    (["--model", "m", "--checkpoints", "c", "--receive", "tcp://0.0.0.0:5555", "--", "--tasks", "easy"],
     "engine servers load each new version from disk: give --weights-dir"),
    ([*FLEET, "--fleet-max-restarts", "2"], "fleet.max_restarts set but no rollout arguments"),
    ([*FLEET, "--fleet-max-restarts", "-1", "--", "--tasks", "easy"], "fleet.max_restarts must be >= 0"),
    ([*FLEET, "--engines", "-1", "--", "--tasks", "easy"], "cluster.engines = -1: expected 0 or more"),
])
def test_a_fleet_that_cannot_run_is_a_usage_error_saying_what_to_give(argv: list[str], named: str,
                                                                       capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as caught:
        _cluster(argv)
    assert caught.value.code == 2 and named in capsys.readouterr().err


def test_with_no_fleet_engines_the_rollout_arguments_name_their_engine_and_the_local_entry_has_no_fleet(
        capsys: pytest.CaptureFixture[str]):
    job = _cluster(["--model", "m", "--checkpoints", "c", "--receive", "tcp://0.0.0.0:5555", "--engines", "0",
                    "--", "--tasks", "easy", "--harness", "reference", "--engine", "tcp://vllm:8000", "--model-dir", "m"])
    assert job.cluster.engines == 0 and "--engine" in job.fleet.rollout_args
    with pytest.raises(SystemExit) as caught:
        _local(["--model", "m", "--checkpoints", "c", "--receive", "tcp://127.0.0.1:1", "--", "--tasks", "easy"])
    assert caught.value.code == 2 and "only python -m lego_rl.cluster.train starts one" in capsys.readouterr().err


def test_a_fleet_table_is_refused_by_the_single_process_trainer(tmp_path: Path):
    config = tmp_path / "job.toml"
    config.write_text('[fleet]\nrollout_args = ["--tasks", "easy"]\n')
    with pytest.raises(JobConfigError, match="fleet.rollout_args is used only by python -m lego_rl.cluster.train"):
        _local(["--config", str(config), "--model", "m", "--checkpoints", "c", "--spool", "s"])
