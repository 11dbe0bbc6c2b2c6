"""Task mining: bugs synthesised in real projects' functions with `ast`, kept
when the project's own tests catch them (SWE-smith / R2E style).

Runs inside a sandbox container built from the project's pristine sdist, with
the image's Python 3.11 and pytest, so mining sees exactly what grading sees;
stdlib only. `lego tasks mine` (ts/src/tasks/mine.ts) drives it.
"""

from .config import MineConfig
from .mutations import Mutation, apply_mutation, find_mutations
from .report import bug_report

__all__ = ["MineConfig", "Mutation", "apply_mutation", "bug_report", "find_mutations"]
