"""scripts/gpu-check where no GPU is: it fails at once with one JSON line saying why, and its
labelled CPU dry run goes through every part and prints the line's full shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts/gpu-check"
NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # torch sees no device even on a machine with one

LINE_KEYS = {"check", "ok", "dry_run", "device", "torch", "cuda", "tests", "model", "trainer_dtype", "engine", "pearson_r3",
             "pearson_no_r3", "gspo_step_s", "gspo_steps_timed", "gspo_tokens_per_step", "server", "seconds"}


def _last_json(stdout: str) -> dict[str, object]:
    lines = stdout.strip().splitlines()
    assert lines, "no output"
    return json.loads(lines[-1])


def test_without_a_driver_it_exits_2_with_one_json_line_naming_the_cause(tmp_path: Path):
    fake = tmp_path / "nvidia-smi"  # what nvidia-smi prints on a machine whose driver is not loaded
    fake.write_text("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n")
    fake.chmod(0o755)
    run = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=30,
                         env={**NO_GPU, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert run.returncode == 2
    assert len(run.stdout.strip().splitlines()) == 1
    line = _last_json(run.stdout)
    assert line["check"] == "gpu" and line["ok"] is False and line["device"] is None
    assert "no NVIDIA GPU: nvidia-smi failed (NVIDIA-SMI has failed because it couldn't communicate" in str(line["error"])
    assert "--dry-run-cpu" in str(line["error"])


def test_with_no_cuda_device_the_python_check_exits_2_naming_the_cause():
    run = subprocess.run([sys.executable, "-m", "lego_rl.gpu_check"], capture_output=True, text=True, timeout=120, env=NO_GPU, cwd=REPO)
    assert run.returncode == 2, run.stderr
    line = _last_json(run.stdout)
    assert line["ok"] is False and line["dry_run"] is False
    assert str(line["error"]).startswith("no CUDA device: torch.cuda.is_available() is False")


def test_the_cpu_dry_run_prints_the_whole_line_labelled_as_a_dry_run():
    run = subprocess.run([str(SCRIPT), "--dry-run-cpu"], capture_output=True, text=True, timeout=480, env=NO_GPU)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    line = _last_json(run.stdout)
    assert set(line) == LINE_KEYS
    assert (line["ok"], line["dry_run"], line["device"], line["tests"]) == (True, True, "cpu", "not run")
    assert line["model"] == {"size": "tiny", "parameters": line["model"]["parameters"], "layers": 4, "experts": 8, "top_k": 2}  # type: ignore[index]
    engine = line["engine"]
    assert isinstance(engine, dict) and engine["dtype"] == "bfloat16" and engine["tokens"] == 8 * 16 and engine["tokens_per_s"] > 0
    assert float(line["pearson_r3"]) >= 0.999 and float(line["pearson_r3"]) >= float(line["pearson_no_r3"])  # type: ignore[arg-type]
    assert float(line["gspo_step_s"]) > 0 and line["gspo_steps_timed"] == 1  # type: ignore[arg-type]
    assert line["server"] == {"kind": None, "status": "skipped: CPU dry run (vLLM and SGLang serve on GPUs)"}
