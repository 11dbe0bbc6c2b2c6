"""The demo's report: markdown with the run's own figures and one PNG per plot; a run folder missing a file is a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lego_rl.demo import DemoReportError, write_report


def _eval(pass1: float) -> dict:
    return {"pass1": pass1, "passK": min(1.0, 2 * pass1), "k": 2, "rows": [{"reward": pass1}] * 4, "scores": [{"task": "t"}] * 2}


def _run(tmp: Path) -> Path:
    (tmp / "run.json").write_text(json.dumps({
        "started_utc": "2026-12-03T14:00:00Z", "minutes": 12.5, "what": "a test run",
        "phase_seconds": {"warm start": 100.0, "GSPO": 400.0}, "settings": {"steps": 2},
    }))
    (tmp / "eval-before.json").write_text(json.dumps(_eval(0.25)))
    (tmp / "eval-after.json").write_text(json.dumps(_eval(0.75)))
    steps = [{"step": i, "batch/groups_trained": 1.0, "rollout/reward_mean": 0.2 * i, "mismatch/pearson_prob": 0.9995 + i * 1e-5,
              "mismatch/k3_kl": 1e-3, "rollout/turns_mean": 2.0, "rollout/tool_calls_mean": 2.0} for i in (1, 2)]
    (tmp / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    return tmp


def test_report_has_the_run_figures_and_every_plot(tmp_path: Path) -> None:
    out = write_report(_run(tmp_path))
    text = out.read_text()
    assert "| held-out pass@1 before (warm start) | 0.250" in text
    assert "| reward gain | +0.500 |" in text
    assert "| pass@2 before → after (a task counts when any of its 2 samples solves it) | 0.500 → 1.000 |" in text
    assert "| min rollout/trainer Pearson | 0.999510 over 2 updates |" in text
    for png in ("reward.png", "correlation.png", "k3-kl.png", "turns.png", "eval.png"):
        assert f"]({png})" in text
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    _run(tmp_path)
    (tmp_path / "eval-after.json").unlink()
    with pytest.raises(DemoReportError, match="eval-after.json is missing"):
        write_report(tmp_path)


def test_another_harness_without_warm_start_or_update_says_so(tmp_path: Path) -> None:
    _run(tmp_path)
    run = json.loads((tmp_path / "run.json").read_text())
    run |= {"harness": "codex", "warm_start": False, "held_out": False, "containers_left": 0, "what": "no update ran"}
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "steps.jsonl").write_text(json.dumps({"step": 1, "batch/groups_trained": 0.0, "rollout/reward_mean": 0.0}) + "\n")
    text = write_report(tmp_path).read_text()
    assert "| harness | codex |" in text
    assert "| pass@1 (nothing held out) before (as initialised) | 0.250" in text
    assert "| min rollout/trainer Pearson | no update ran |" in text
    assert "| GSPO steps (updates) | 1 (0) |" in text
    assert "| sandbox containers left behind | 0 |" in text
