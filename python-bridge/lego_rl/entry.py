"""How every `python -m lego_rl...` entry point ends on an error: one line naming
what is wrong and what to do, exit status 1; the traceback only with --verbose.

Entry points call `run_entry(main)` under `if __name__ == "__main__":`. The
`--verbose` flag is taken off argv here, before the entry point's own parser,
so every entry point has it without declaring it.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

VERBOSE_FLAG = "--verbose"


def error_line(prog: str, error: BaseException) -> str:
    """`prog: message — remedy`; an error's `hint` attribute, when it has one, is the remedy."""
    lines = str(error).strip().splitlines()
    message = lines[0] if lines else type(error).__name__
    hint = getattr(error, "hint", None)
    remedy = f"{hint} (add {VERBOSE_FLAG} for the traceback)" if hint else f"add {VERBOSE_FLAG} for the traceback"
    return f"{prog}: {type(error).__name__}: {message} — {remedy}"


def run_entry(main: Callable[[list[str]], int | None], prog: str, argv: list[str] | None = None) -> int:
    """Runs `main(argv)` and returns the exit status to pass to sys.exit."""
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = VERBOSE_FLAG in args
    args = [a for a in args if a != VERBOSE_FLAG]
    try:
        return main(args) or 0
    except Exception as error:  # SystemExit (argparse, explicit exits) and KeyboardInterrupt pass through
        if verbose:
            traceback.print_exc()
        print(error_line(prog, error), file=sys.stderr, flush=True)
        return 1
