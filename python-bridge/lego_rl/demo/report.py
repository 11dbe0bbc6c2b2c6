"""The report of one demo run: `python -m lego_rl.demo.report --run DIR`.

Reads what the run left in DIR (written by `lego demo`, ts/src/demo/):
    run.json        the run's settings, timings and figures (before/after pass@1, gain, minutes)
    steps.jsonl     the GSPO trainer's metrics, one line per step
    eval-before.json, eval-after.json   the held-out evaluations (`lego eval --report`)
and writes DIR/report.md with PNG plots beside it: reward, rollout/trainer probability
correlation and k3 KL per step, turns and tool calls per step, held-out pass@1 before and
after. Nothing is recomputed here; the figures are the run's own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server
import matplotlib.pyplot as plt  # noqa: E402

from ..entry import run_entry  # noqa: E402


class DemoReportError(ValueError):
    """A run folder lacks what the report is made from."""

    hint = "run `lego demo` to the end first; the report is written from its run folder"


def _json(path: Path) -> Any:
    if not path.is_file():
        raise DemoReportError(f"{path} is missing")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DemoReportError(f"{path} is not JSON: {error}") from error


def _steps(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DemoReportError(f"{path} is missing")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _plot(out: Path, title: str, series: dict[str, tuple[list[float], list[float]]], ylabel: str,
          hline: float | None = None) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=label)
    if hline is not None:
        ax.axhline(hline, color="grey", linestyle="--", linewidth=1)
    ax.set_title(title)
    ax.set_xlabel("GSPO step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out.name


def _column(steps: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    pts = [(s["step"], s[key]) for s in steps if s.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def write_report(run_dir: Path) -> Path:
    run = _json(run_dir / "run.json")
    before, after = _json(run_dir / "eval-before.json"), _json(run_dir / "eval-after.json")
    steps = _steps(run_dir / "steps.jsonl")
    plots = {
        "reward": _plot(run_dir / "reward.png", "mean reward of the training rollouts",
                        {"reward": _column(steps, "rollout/reward_mean")}, "reward"),
        "pearson": _plot(run_dir / "correlation.png", "rollout/trainer probability correlation",
                         {"Pearson": _column(steps, "mismatch/pearson_prob")}, "Pearson", hline=0.999),
        "kl": _plot(run_dir / "k3-kl.png", "k3 KL(rollout || trainer)", {"k3 KL": _column(steps, "mismatch/k3_kl")}, "k3 KL"),
        "turns": _plot(run_dir / "turns.png", "turns and tool calls per rollout",
                       {"turns": _column(steps, "rollout/turns_mean"), "tool calls": _column(steps, "rollout/tool_calls_mean")}, "per rollout"),
    }
    fig, ax = plt.subplots(figsize=(4, 3.2), dpi=100)
    ax.bar([f"{'warm start' if run.get('warm_start', True) else 'initial'} (before)", "after GSPO"], [before["pass1"], after["pass1"]],
           color=["#999999", "#3070b0"])
    ax.set_ylim(0, 1)
    ax.set_ylabel("held-out pass@1" if run.get("held_out", True) else "pass@1")
    ax.set_title("held-out evaluation, same tasks")
    fig.tight_layout()
    fig.savefig(run_dir / "eval.png")
    plt.close(fig)
    plots["eval"] = "eval.png"

    pearsons = [s["mismatch/pearson_prob"] for s in steps if s.get("mismatch/pearson_prob") is not None]
    # Older run folders lack these keys; they were the reference harness, warm-started, on held-out tasks.
    which = "held-out pass@1" if run.get("held_out", True) else "pass@1 (nothing held out)"
    start = "warm start" if run.get("warm_start", True) else "as initialised"
    lines = [
        f"# lego demo report ({run['started_utc']})",
        "",
        f"{run['what']}",
        "",
        "| | value |",
        "|---|---|",
        f"| harness | {run.get('harness', 'reference')} |",
        f"| {which} before ({start}) | {before['pass1']:.3f} ({len(before['rows'])} rollouts on {len(before['scores'])} tasks) |",
        f"| {which} after GSPO | {after['pass1']:.3f} (same tasks, same sampling settings) |",
        f"| reward gain | {after['pass1'] - before['pass1']:+.3f} |",
        # Beside pass@1: a gain that only concentrates the policy on what it already did shows as pass@k flat or falling.
        *([f"| pass@{before['k']} before → after (a task counts when any of its {before['k']} samples solves it) | "
           f"{before['passK']:.3f} → {after['passK']:.3f} |"] if "passK" in before and "passK" in after and "k" in before else []),
        f"| min rollout/trainer Pearson | {min(pearsons):.6f} over {len(pearsons)} updates |" if pearsons else "| min rollout/trainer Pearson | no update ran |",
        f"| GSPO steps (updates) | {len(steps)} ({sum(1 for s in steps if s.get('batch/groups_trained'))}) |",
        f"| minutes, whole run | {run['minutes']:.1f} |",
        *([f"| sandbox containers left behind | {run['containers_left']} |"] if "containers_left" in run else []),
        "",
        "## Phases",
        "",
        "| phase | seconds |",
        "|---|---|",
        *[f"| {k} | {v:.0f} |" for k, v in run["phase_seconds"].items()],
        "",
        "## Settings",
        "",
        "```json",
        json.dumps(run["settings"], indent=1),
        "```",
        "",
        "## Plots",
        "",
        *[f"![{k}]({v})" for k, v in plots.items()],
        "",
    ]
    out = run_dir / "report.md"
    out.write_text("\n".join(lines))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.demo.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="the run folder `lego demo` wrote")
    args = parser.parse_args(argv)
    print(json.dumps({"report": str(write_report(args.run))}))
    return 0


if __name__ == "__main__":
    sys.exit(run_entry(main, "python -m lego_rl.demo.report"))
