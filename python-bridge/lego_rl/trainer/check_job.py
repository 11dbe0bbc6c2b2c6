"""`python -m lego_rl.trainer.check_job FILE.toml`: the checks of lego_rl.trainer.plan, one JSON line each.

`lego check --config FILE` runs this and prints the lines as its own; exit 1 when any check failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .plan import check_job_file


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m lego_rl.trainer.check_job FILE.toml  (one JSON line per check; exit 1 if any failed)", file=sys.stderr)
        return 2
    checks = check_job_file(Path(argv[0]))
    for check in checks:
        print(check.json())
    return 0 if all(c.ok for c in checks) else 1

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
