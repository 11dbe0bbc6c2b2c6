"""A user error at a Python entry point: one line naming what is wrong and what to do, exit 1;
the traceback only with --verbose (lego_rl/entry.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _trainer(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    missing = tmp_path / "no-such-model"
    return subprocess.run(
        [sys.executable, "-m", "lego_rl.trainer", "--model", str(missing), "--spool", str(tmp_path / "spool"),
         "--checkpoints", str(tmp_path / "ckpt"), *extra],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )


def test_missing_model_is_one_line_without_a_traceback(tmp_path: Path):
    result = _trainer(tmp_path)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("python -m lego_rl.trainer: ")
    assert "no-such-model" in lines[0] and lines[0].endswith("add --verbose for the traceback")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").iterdir())  # nothing half-written


def test_verbose_adds_the_traceback(tmp_path: Path):
    result = _trainer(tmp_path, "--verbose")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("python -m lego_rl.trainer: ")


def test_argparse_usage_errors_keep_their_own_exit_status(tmp_path: Path):
    result = subprocess.run([sys.executable, "-m", "lego_rl.trainer", "--model"], capture_output=True, text=True,
                            timeout=120, cwd=REPO)
    assert result.returncode == 2 and "usage:" in result.stderr and "Traceback" not in result.stderr


def test_a_trainable_pattern_matching_nothing_ends_the_ray_job_before_ray_or_a_rank_starts(byte_model_dir: Path, tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "lego_rl.cluster.train", "--model", str(byte_model_dir), "--spool", str(tmp_path / "spool"),
         "--checkpoints", str(tmp_path / "ckpt"), "--trainable-parameters", r"^lm_head\."],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "matches no parameter of the model" in lines[0] and "tied to model.embed_tokens.weight" in lines[0]
    assert not (tmp_path / "ckpt").exists()
