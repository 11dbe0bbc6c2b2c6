"""The README promises two commands that set up a fresh machine; hold it to that."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_first_code_block_holds_exactly_the_demo_and_test_commands() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```\w*\n(.*?)```", readme, re.S)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block[1].splitlines() if line.split("#")[0].strip()]
    assert commands == ["scripts/demo", "scripts/test"]


def test_ci_runs_the_readme_test_command_and_nothing_else() -> None:
    lines = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[-1] == "exec scripts/test"


def test_setup_on_a_ready_machine_installs_nothing_and_says_what_it_found() -> None:
    # Its speed (under 10 s) is measured by a benchmark command, not asserted here.
    result = subprocess.run([str(REPO / "scripts" / "setup")], capture_output=True, text=True, timeout=300, check=True)
    lines = result.stdout.splitlines()
    assert "setup: pnpm 12.4.2 present" in lines
    assert any(line.startswith("setup: Python environment ready: .venv") for line in lines)
    assert any(line.startswith("setup: Docker daemon answering") for line in lines)
    assert not [line for line in lines if line.startswith(("setup: installed", "setup: started"))]
    assert re.fullmatch(r"setup: done in \d+ s", lines[-1])
