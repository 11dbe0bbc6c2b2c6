"""The miner's one config, built by the entry point (mine.py) from the JSON the TS side writes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(kw_only=True, slots=True)
class MineConfig:
    """What to mine in one project's pristine workspace, and how hard to try."""

    project: str
    """Project name, used in task ids (`<project>-<mutation id>`)."""
    workspace: str = "/workspace"
    """The project's source tree; tests run with it as pytest's rootdir."""
    sources: list[str] = field(default_factory=list)
    """Files (relative to the workspace) whose functions are mutated; tests are never mutated."""
    seed: int = 0
    """Seeds the order candidates are tried in; same seed, same tasks, byte for byte."""
    max_candidates: int = 60
    """Mutations tried (each one runs the project's tests) before giving up on more tasks."""
    max_tasks: int = 30
    """Tasks kept per project."""
    max_failing: int = 40
    """A mutation failing more tests than this is too broad to read as one bug report."""
    pytest_ini: str = "/tests/pytest.ini"
    """The verifier's ini (`-c`): mining runs pytest exactly as grading does."""
    test_timeout_factor: float = 5.0
    """A candidate's test run is cut off at this multiple of the pristine run's time (plus 10 s)."""
    one_per_function: bool = True
    """Keep at most one task per function, so the suite spreads over the project."""
