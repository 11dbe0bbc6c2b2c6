"""Bug reports written from the failing behaviour, as a user would file them:
which tests fail, the assertion, what came out and what was expected. Never
from the diff: the report is built only from what the test run showed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_ASSERT_EQ = re.compile(r"^(?:AssertionError: )?assert (.+?) == (.+)$")
_UNITTEST_NE = re.compile(r"^AssertionError: (.+?) != (.+)$")
_SOURCE_EQ = re.compile(r"^>\s+assert (.+?) == (.+?)(?:,.*)?$")
_WHERE = re.compile(r"^\+?\s*where (.+?) = .+\(.*\)$")


@dataclass(frozen=True, slots=True)
class Failure:
    """One failing test as the run reported it."""

    nodeid: str
    message: str
    """pytest's crash message (first lines of the assertion or exception)."""
    explanation: list[str]
    """pytest's `E` lines, where `+  where X = f(…)` says which operand a call computed."""


def _clean(message: str, limit: int = 6) -> list[str]:
    lines = [_ADDRESS.sub(" at 0x…", line.rstrip()) for line in message.strip().splitlines()]
    lines = [line for line in lines if line.strip()]
    return [line[:200] for line in lines[:limit]]


def _observed_expected(first_line: str, explanation: list[str]) -> tuple[str, str] | None:
    """(observed, expected) when the assertion compares a call's result with a value; None when it cannot tell which is which."""
    m = _ASSERT_EQ.match(first_line) or _UNITTEST_NE.match(first_line)
    if not m:
        return None
    left, right = m.group(1).strip(), m.group(2).strip()
    if len(left) > 120 or len(right) > 120:
        return None
    for line in explanation:
        w = _WHERE.match(line.removeprefix("E").strip())
        if w and w.group(1) in (left, right):
            return (left, right) if w.group(1) == left else (right, left)
    # No `where` (pytest leaves it out of string diffs): the side of the source line that calls something.
    for line in explanation:
        src = _SOURCE_EQ.match(line)
        if src:
            lhs_call, rhs_call = "(" in src.group(1), "(" in src.group(2)
            if lhs_call != rhs_call:
                return (left, right) if lhs_call else (right, left)
    return None


def bug_report(project: str, version: str, failures: list[Failure], passing: int) -> str:
    """The problem statement of a mined task."""
    first = failures[0]
    msg = _clean(first.message)
    title_test = first.nodeid.split("::")[-1]
    lines = [f"{project} {version}: `{title_test}` fails", ""]
    n = len(failures)
    lines.append(f"Running the project's test suite, {n} test{'s' if n > 1 else ''} fail{'' if n > 1 else 's'}:")
    lines.append("")
    for f in failures[:5]:
        lines.append(f"- `{f.nodeid}`")
    if n > 5:
        lines.append(f"- … and {n - 5} more")
    lines.append("")
    if msg:
        lines.append(f"`{first.nodeid}` fails with:")
        lines.append("")
        lines.append("```")
        lines.extend(msg)
        lines.append("```")
        lines.append("")
        oe = _observed_expected(msg[0], [_ADDRESS.sub(" at 0x…", e) for e in first.explanation])
        if oe:
            lines.append(f"It gets `{oe[0]}` where `{oe[1]}` is expected.")
            lines.append("")
    files = len({f.nodeid.split("::", 1)[0] for f in failures})
    lines.append(f"The other {passing} tests in the same test file{'s' if files > 1 else ''} pass. The tests are right; the library code has a bug. Please fix it without changing the tests.")
    return "\n".join(lines) + "\n"
