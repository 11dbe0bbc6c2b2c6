"""Supervised warm start on real demonstrations: `lego rollout` with the reference harness
and the scripted-gold engine, in real Docker sandboxes, through the proxy, into a real
receiver spool; then the SFT pass on the tiny Qwen3-vocabulary MoE.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lego_rl.model import load_model
from lego_rl.model.tiny import write_tiny_model
from lego_rl.trainer.sft import (SftConfig, SftDataError, action_probability, load_demonstrations, main,
                                 pack_demonstrations, sft_loss, train_sft, write_model_dir)

from ..conftest import REPO_ROOT

LEGO = REPO_ROOT / "ts" / "bin" / "lego"


def _rollout_into_spool(spool: Path, work: Path, engine: str, tasks: str) -> None:
    """A real receiver, and `lego rollout` shipping to it; both end before this returns."""
    receiver = subprocess.Popen(
        [sys.executable, "-m", "lego_rl.transport", "receive", "--bind", "tcp://127.0.0.1:*", "--spool", str(spool)],
        stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )
    try:
        assert receiver.stdout is not None
        listening = json.loads(receiver.stdout.readline())  # the receiver's first line; it exits on error, ending readline
        assert listening["type"] == "listening", listening
        done = subprocess.run(
            [str(LEGO), "rollout", "--tasks", tasks, "--harness", "reference", "--engine", engine, "--group-size", "1",
             "--concurrency", "2", "--trainer", listening["address"], "--spool-dir", str(work / f"sender-{engine}"),
             "--producer-id", f"sft-test-{engine}"],
            capture_output=True, text=True, timeout=400, cwd=REPO_ROOT,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["event"] == "summary" and summary["droppedEnvErrors"] == 0, summary
    finally:
        receiver.terminate()
        receiver.wait(timeout=30)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sft")


@pytest.fixture(scope="module")
def gold_spool(work: Path) -> Path:
    spool = work / "gold"
    _rollout_into_spool(spool, work, "scripted-gold", "easy:seed=11,count=2")
    return spool


@pytest.fixture(scope="module")
def tiny_model(work: Path) -> Path:
    return write_tiny_model(work / "tiny", tokenizer="qwen3", seed=0)


def test_demonstrations_are_the_recorded_gold_episodes(gold_spool: Path) -> None:
    demos = load_demonstrations(gold_spool)
    assert len(demos.trajectories) == 2 and demos.skipped == {} and demos.files == 2
    for t in demos.trajectories:
        assert t.status == "ok" and t.reward == 1.0 and t.harness == "reference/scripted-gold"
        mask = np.concatenate([s.loss_mask for s in t.segments])
        assert 0 < mask.sum() < mask.size  # the assistant's tokens train, the prompt and tool outputs do not


def test_only_trainable_tokens_are_targets_and_the_loss_ignores_the_rest(gold_spool: Path, tiny_model: Path) -> None:
    demo = load_demonstrations(gold_spool).trajectories[0]
    model = load_model(tiny_model)
    cfg = model.config
    step = pack_demonstrations([demo], layers=len(cfg.moe_layers), top_k=cfg.num_experts_per_tok)
    expected = np.concatenate([s.token_ids[s.loss_mask.astype(bool)] for s in demo.segments])
    assert step.targets_R.tolist() == expected.tolist()
    # The same loss computed by hand: full logits of each segment, cross-entropy at the masked-in positions only.
    with torch.no_grad():
        packed = sft_loss(model, step)
        losses = []
        for segment in demo.segments:
            ids = torch.from_numpy(segment.token_ids.astype(np.int64))
            logits = model(ids).logits.float()
            where = torch.from_numpy(np.flatnonzero(segment.loss_mask))
            losses.append(torch.nn.functional.cross_entropy(logits[where - 1], ids[where], reduction="none"))
        by_hand = torch.cat(losses).mean()
    assert torch.allclose(packed, by_hand, rtol=1e-4, atol=1e-4), (float(packed), float(by_hand))


def test_loss_falls_and_the_written_model_dir_loads(gold_spool: Path, tiny_model: Path, work: Path) -> None:
    demos = load_demonstrations(gold_spool).trajectories
    model = load_model(tiny_model)
    rows = train_sft(model, demos, SftConfig(steps=8, batch_trajectories=1, lr=2e-3, warmup_steps=2))
    assert len(rows) == 8 and all(np.isfinite(r["loss"]) for r in rows)
    first, last = rows[0]["loss"] + rows[1]["loss"], rows[-1]["loss"] + rows[-2]["loss"]
    assert last < first - 1.0, [r["loss"] for r in rows]
    out = work / "warm"
    write_model_dir(model, tiny_model, out)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (out / name).is_file(), name
    reloaded = load_model(out)
    cfg = model.config
    step = pack_demonstrations(demos[:1], layers=len(cfg.moe_layers), top_k=cfg.num_experts_per_tok)
    with torch.no_grad():
        assert torch.allclose(sft_loss(reloaded, step), sft_loss(model.eval(), step), atol=1e-5)


def test_action_probability_is_the_teacher_forced_probability_of_the_whole_demonstrated_action(gold_spool: Path, tiny_model: Path) -> None:
    demos = load_demonstrations(gold_spool).trajectories
    model = load_model(tiny_model)
    cfg = model.config
    singles = []
    for demo in demos[:2]:
        step = pack_demonstrations([demo], layers=len(cfg.moe_layers), top_k=cfg.num_experts_per_tok)
        with torch.no_grad():
            mean_nll = float(sft_loss(model.eval(), step))
        singles.append(np.exp(-mean_nll * step.targets_R.numel()))
        assert action_probability(model, [demo]) == pytest.approx(singles[-1], rel=1e-4)
    assert action_probability(model, demos[:2]) == pytest.approx(np.mean(singles), rel=1e-4)


def test_the_warm_start_stops_once_the_action_probability_is_reached_and_runs_to_the_cap_otherwise(gold_spool: Path, tiny_model: Path) -> None:
    demos = load_demonstrations(gold_spool).trajectories
    config = SftConfig(steps=6, batch_trajectories=1, lr=2e-3, warmup_steps=2, check_every=2)
    # The gold episodes are long: an untrained model's whole-action probability underflows to 0.0, which a
    # target of 0 is reached by at the first check.
    reached = train_sft(load_model(tiny_model), demos, SftConfig(**{**_fields(config), "stop_at_action_probability": 0.0}))
    assert [r["step"] for r in reached] == [1, 2] and "action_probability" in reached[-1]
    capped = train_sft(load_model(tiny_model), demos, SftConfig(**{**_fields(config), "stop_at_action_probability": 1.0}))
    assert [r["step"] for r in capped if "action_probability" in r] == [2, 4, 6] and len(capped) == 6
    assert all("action_probability" not in r for r in train_sft(load_model(tiny_model), demos, config))


def test_a_target_probability_outside_0_to_1_is_a_usage_error(gold_spool: Path, tiny_model: Path, work: Path) -> None:
    for bad in ("0", "1.5", "-0.1"):
        with pytest.raises(SystemExit) as exit_info:
            main(["--spool", str(gold_spool), "--model-dir", str(tiny_model), "--out", str(work / "never"), "--stop-at-action-probability", bad])
        assert exit_info.value.code == 2
    assert not (work / "never").exists()


def _fields(config: SftConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in SftConfig.__dataclass_fields__}


def test_failed_demonstrations_do_not_train(work: Path) -> None:
    spool = work / "failed"
    _rollout_into_spool(spool, work, "answer-at-once", "easy:seed=11,count=1")
    with pytest.raises(SftDataError, match="no successful demonstration") as error:
        load_demonstrations(spool)
    assert "reward_below_1" in str(error.value)


def test_bad_spools_fail_with_a_clear_line_and_lose_nothing(work: Path, tiny_model: Path) -> None:
    def sft(spool: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lego_rl.trainer.sft", "--spool", str(spool), "--model-dir", str(tiny_model),
             "--out", str(work / "never")], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        )

    missing = sft(work / "no-such-spool")
    assert missing.returncode == 1 and "SftDataError" in missing.stderr and "is not a folder" in missing.stderr
    empty = work / "empty"
    (empty / "batches").mkdir(parents=True)
    assert "no demonstration batches" in sft(empty).stderr
    corrupt = work / "corrupt"
    (corrupt / "batches").mkdir(parents=True)
    garbage = corrupt / "batches" / "x.lgrb"
    garbage.write_bytes(b"not a spool file")
    bad = sft(corrupt)
    assert bad.returncode == 1 and "x.lgrb is unreadable" in bad.stderr and "lego rollout" in bad.stderr  # the hint
    assert garbage.read_bytes() == b"not a spool file"  # nothing moved or deleted
    assert not (work / "never").exists()
