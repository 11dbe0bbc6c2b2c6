"""A pytest run that writes each test's outcome as JSON lines, for the miner.

Run as `python3 -I -c BOOTSTRAP OUT_FILE PYTEST_ARGS…` (see mine.py): the
plugin object is handed to `pytest.main`, so nothing is imported from the
workspace to find it, and pytest otherwise runs exactly as the verifier runs it.
"""

from __future__ import annotations

import json
import sys


class Collector:
    """Records the outcome of every test (setup, call and teardown folded into one) and collection errors."""

    def __init__(self, out) -> None:
        self.out = out
        self.seen: dict[str, dict] = {}

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.out.write(json.dumps({"collect_error": report.nodeid, "message": str(report.longrepr)[-2000:]}) + "\n")

    def pytest_runtest_logreport(self, report) -> None:
        rec = self.seen.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "message": "", "explanation": []})
        if report.failed and rec["outcome"] != "failed":
            rec["outcome"] = "failed"
            crash = getattr(report.longrepr, "reprcrash", None)
            rec["message"] = crash.message if crash is not None else str(report.longrepr)[-2000:]
            # pytest's explanation lines ("E   +  where 'x' = f(1)") and the failing source
            # line (">   assert x == f(1)") say which operand a call produced.
            text = str(report.longrepr).splitlines()
            rec["explanation"] = [line.strip() for line in text if line.startswith(("E ", "> "))][-20:]
        elif report.skipped and rec["outcome"] == "passed":
            rec["outcome"] = "skipped"

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        for rec in self.seen.values():
            self.out.write(json.dumps(rec) + "\n")
        self.out.write(json.dumps({"exit": int(exitstatus)}) + "\n")
        self.out.flush()


def main() -> int:
    import pytest

    with open(sys.argv[1], "w", encoding="utf-8") as out:
        return int(pytest.main(sys.argv[2:], plugins=[Collector(out)]))
