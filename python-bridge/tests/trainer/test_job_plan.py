"""A job checked before it runs (lego_rl/trainer/plan.py): the shipped Qwen3-30B-A3B-shaped configs pass,
each broken variant fails naming what to change, and the parameter count is the real module's."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lego_rl.model import Config, MoeBlock, MoeForCausalLM, read_config, replicated_parameters
from lego_rl.trainer import check_job_file, parameter_counts, trainer_bundles
from lego_rl.trainer.job import ClusterConfig

REPO = Path(__file__).resolve().parents[3]
SHIPPED = sorted((REPO / "examples/qwen3-30b-a3b").glob("*.toml"))


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # model.path is relative to where the job runs, as the entry point reads it


def _variant(tmp_path: Path, replace: dict[str, str]) -> Path:
    text = (REPO / "examples/qwen3-30b-a3b/train-job.toml").read_text()
    for old, new in replace.items():
        assert re.search(old, text, re.M), old
        text = re.sub(old, new, text, flags=re.M)
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path


def _failed(path: Path) -> dict[str, dict[str, str]]:
    return {c.name: {"detail": c.detail, "fix": c.fix or ""} for c in check_job_file(path) if not c.ok}


def test_the_shipped_configs_are_qwen3_30b_a3b_shaped():
    config = read_config(REPO / "examples/qwen3-30b-a3b")
    assert (config.num_hidden_layers, config.num_experts, config.num_experts_per_tok) == (48, 128, 8)
    assert (config.hidden_size, config.moe_intermediate_size, config.vocab_size) == (2048, 768, 151936)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (32, 4, 128)
    assert len(SHIPPED) == 2
    engines = {path.name: path.read_text() for path in SHIPPED}
    assert any("vllm = [" in t for t in engines.values()) and any("sglang = [" in t for t in engines.values())


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_a_shipped_config_passes_every_check(path: Path):
    checks = check_job_file(path)
    assert [c.name for c in checks] == ["job", "model", "expert parallel", "devices", "placement", "memory", "engines"]
    assert all(c.ok and not c.skipped for c in checks), [c for c in checks if not c.ok or c.skipped]
    memory = next(c for c in checks if c.name == "memory").detail
    assert "30.53B parameters" in memory and "16 B/parameter" in memory and "bf16 weights alone" in memory


def test_the_parameter_count_is_the_real_modules():
    # Every feature the count branches on: dense layers, a shared expert, attention bias, untied head.
    config = Config(vocab_size=300, hidden_size=16, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=8, intermediate_size=24, moe_intermediate_size=12, num_experts=4, num_experts_per_tok=2,
                    shared_expert_intermediate_size=10, mlp_only_layers=(1,), attention_bias=True, decoder_sparse_step=1)
    # Qwen3-30B-A3B's widths with 2 of its 48 layers: the count is per layer, and 48 take seconds on meta.
    qwen = dataclasses.replace(read_config(REPO / "examples/qwen3-30b-a3b"), num_hidden_layers=2)
    for variant in (config, qwen):
        with torch.device("meta"):
            model = MoeForCausalLM(variant)
        routed = sum(p.numel() for b in model.modules() if isinstance(b, MoeBlock) for p in b.experts.parameters())
        counts = parameter_counts(variant)
        assert (counts.replicated, counts.routed_experts) == (sum(p.numel() for p in replicated_parameters(model)), routed)


def test_bundles_carry_gpus_only_for_gpu_ranks():
    assert trainer_bundles(ClusterConfig(trainer_ranks=2)) == [{"CPU": 1}, {"CPU": 1}]
    assert trainer_bundles(ClusterConfig(trainer_ranks=2, gpus_per_rank=1, cpus_per_rank=8)) == [{"CPU": 8, "GPU": 1}] * 2


@pytest.mark.parametrize(("replace", "check", "detail", "fix"), [
    ({r"^trainer_ranks = 16.*$": "trainer_ranks = 12"}, "expert parallel",
     "128 experts do not split evenly over cluster.trainer_ranks = 12", "a divisor of 128: 1, 2, 4, 8, 16, 32, 64, 128"),
    ({r"^nodes = 2": "nodes = 1"}, "placement", "16 trainer bundle(s) of {'CPU': 8, 'GPU': 1} do not fit 1 node(s)", "add nodes"),
    ({r"^cpus_per_rank = 8": "cpus_per_rank = 13"}, "placement", "do not fit 2 node(s) of 96 CPU", "cpus_per_rank"),
    ({r"^trainer_ranks = 16.*$": "trainer_ranks = 8"}, "memory", "a rank holds 5.16B -> 77.0 GiB", "more trainer ranks"),
    ({r'^backend = "nccl"': 'backend = "gloo"'}, "devices", "GPU ranks with backend 'gloo'", 'backend = "nccl"'),
    ({r"^gpus_per_rank = 1": "gpus_per_rank = 0"}, "devices", "backend 'nccl' with CPU ranks", "gpus_per_rank >= 1"),
    ({r'"http://rollout-0:8000"': '"rollout-0:8000"'}, "engines", "vLLM address 'rollout-0:8000'", "http://HOST:PORT"),
    ({r'^path = "examples/qwen3-30b-a3b"': 'path = "examples/nowhere"'}, "model", "config.json not found", "model.path"),
    ({r"^gpus_per_rank = 1": 'gpus_per_rank = "one"'}, "job", "cluster.gpus_per_rank = 'one': expected an integer", "fix the key"),
    ({r"^vllm = ": "trtllm = "}, "job", "unknown key weights.trtllm (known in [weights]: dir, sglang, vllm, engine)", "fix the key"),
    ({r"^gpu_memory_gib = 80.*$": "gpu_memory_gib = 80\ntflops = 989"}, "job", "unknown key hardware.tflops", "fix the key"),
])
def test_a_broken_variant_fails_naming_the_fix(tmp_path: Path, replace: dict[str, str], check: str, detail: str, fix: str):
    failed = _failed(_variant(tmp_path, replace))
    assert list(failed) == [check], failed
    assert detail in failed[check]["detail"] and fix in failed[check]["fix"], failed[check]


def test_without_a_gpu_size_the_memory_is_stated_but_not_compared(tmp_path: Path):
    memory = next(c for c in check_job_file(_variant(tmp_path, {r"^gpu_memory_gib = 80.*$": ""})) if c.name == "memory")
    assert memory.ok and memory.skipped and "3.35B -> 50.0 GiB" in memory.detail and "no [hardware] gpu_memory_gib" in memory.detail


def test_the_single_process_trainer_refuses_a_hardware_table(tmp_path: Path):
    from lego_rl.trainer import JobConfigError
    from lego_rl.trainer.job import read_job_file

    path = tmp_path / "job.toml"
    path.write_text("[hardware]\nnodes = 1\n")
    with pytest.raises(JobConfigError, match="hardware.nodes is used only by python -m lego_rl.cluster.train"):
        read_job_file(path, "local")


def test_the_entry_prints_one_json_line_per_check_and_exits_1_on_a_failure(tmp_path: Path):
    command = [sys.executable, "-m", "lego_rl.trainer.check_job"]
    ok = subprocess.run([*command, str(SHIPPED[0])], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == ""
    lines = [json.loads(line) for line in ok.stdout.splitlines()]
    assert [line["name"] for line in lines][0] == "job" and all(line["ok"] for line in lines)
    bad = subprocess.run([*command, str(_variant(tmp_path, {r"^nodes = 2": "nodes = 1"}))], capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert bad.returncode == 1
    assert {"name": "placement", "ok": False}.items() <= json.loads(bad.stdout.splitlines()[4]).items()


def test_the_entry_without_one_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]):
    from lego_rl.trainer.check_job import main

    assert main([]) == 2 and main(["--help"]) == 2
    assert "usage: python -m lego_rl.trainer.check_job FILE.toml" in capsys.readouterr().err
