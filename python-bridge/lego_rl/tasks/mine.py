"""Mines one project: tries mutations in a seeded order, runs the project's
tests on each, keeps those the tests catch.

A candidate is kept only if the tests still collect, at least one test that
passes on the pristine tree fails (FAIL_TO_PASS), no more than
`max_failing` do, every other pristine-passing test in the test files
involved still passes (PASS_TO_PASS), and the fix passes its own verifier:
the named tests, run as the generated verifier runs them (FAIL_TO_PASS then
PASS_TO_PASS, ts/src/tasks/materialize.ts), all pass on the pristine tree.
That order is not the file's, and a test file whose tests depend on their
order (six's `test_lazy` asserts `html.parser` is not imported yet, which
`test_move_items[html_parser]` imports) would otherwise yield a task whose
gold scores 0. Every tried candidate is written as a
JSON line to the output file (kept ones with their bug report, fix patch and
named tests; rejected ones with the reason), so the TS side can count
rejections by reason.

Entry point (inside the project's sandbox container, see ts/src/tasks/mine.ts):
    python3 -I -c BOOTSTRAP CONFIG.json OUT.jsonl      (BOOTSTRAP with module="mine")
PYTHONHASHSEED is fixed in the test runs so that messages quoting sets and
dicts (the bug reports) come out the same on every run.
"""

from __future__ import annotations

import difflib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from .config import MineConfig
from .mutations import Mutation, apply_mutation, find_mutations
from .report import Failure, bug_report

#: Starts the collector with the lego_rl package found where the TS side copied it (argv[0] is '-c').
BOOTSTRAP = "import sys; sys.path.insert(0, {root!r}); from lego_rl.tasks.{module} import main; sys.exit(main())"


@dataclass(slots=True)
class TestRun:
    outcomes: dict[str, tuple[str, str]]
    """nodeid → (outcome, crash message), in collection order."""
    explanations: dict[str, list[str]]
    """nodeid → pytest's `E` lines for a failed test."""
    collect_errors: list[str]
    exit: int | None
    timed_out: bool
    seconds: float


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_tests(cfg: MineConfig, timeout_s: float, nodeids: list[str] | None = None) -> TestRun:
    """The project's whole test suite (or the named tests, in the order given), run the way the generated verifier runs pytest."""
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as f:
        out = f.name
    code = BOOTSTRAP.format(root=_package_root(), module="collect")
    # -P -s rather than -I: -I also implies -E, which would ignore PYTHONHASHSEED. With the
    # environment below fixed, that is -I with a fixed hash seed (set and dict reprs in messages).
    cmd = [sys.executable, "-P", "-s", "-c", code, out, "-p", "no:cacheprovider", "-o", "addopts=", "-c", cfg.pytest_ini, f"--rootdir={cfg.workspace}", "-q", *(nodeids or [])]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=cfg.workspace, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s,
                              env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"})
        timed_out = False
        del proc
    except subprocess.TimeoutExpired:
        timed_out = True
    seconds = time.monotonic() - t0
    outcomes: dict[str, tuple[str, str]] = {}
    explanations: dict[str, list[str]] = {}
    errors: list[str] = []
    exit_code = None
    with open(out, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if "collect_error" in rec:
                errors.append(rec["collect_error"])
            elif "exit" in rec:
                exit_code = rec["exit"]
            else:
                outcomes[rec["nodeid"]] = (rec["outcome"], rec["message"])
                explanations[rec["nodeid"]] = rec["explanation"]
    os.unlink(out)
    return TestRun(outcomes, explanations, errors, exit_code, timed_out, seconds)


def unified_diff(path: str, before: str, after: str) -> str:
    """A git-style diff of one file (`git apply` takes it), "No newline at end of file" marked as git marks it."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    out = [f"diff --git a/{path} b/{path}\n"]
    for line in difflib.unified_diff(a, b, f"a/{path}", f"b/{path}", n=3):
        out.append(line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n")
    return "".join(out)


def _test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def mine(cfg: MineConfig, version: str, out) -> dict:
    """Writes one JSON line per tried candidate to `out`; returns counts."""
    baseline = run_tests(cfg, timeout_s=600)
    if baseline.collect_errors or baseline.timed_out:
        raise SystemExit(f"{cfg.project}: the pristine tests do not collect: {baseline.collect_errors[:3]}")
    # Sorted: collection order can follow set iteration (parametrize over a set), which is not stable.
    passing = sorted(n for n, (o, _) in baseline.outcomes.items() if o == "passed")
    if not passing:
        raise SystemExit(f"{cfg.project}: no test passes on the pristine tree")
    limit = baseline.seconds * cfg.test_timeout_factor + 10
    sources = {p: open(os.path.join(cfg.workspace, p), encoding="utf-8").read() for p in sorted(cfg.sources)}
    candidates: list[Mutation] = [m for p, src in sources.items() for m in find_mutations(src, p)]
    random.Random(cfg.seed).shuffle(candidates)
    counts = {"candidates": len(candidates), "tried": 0, "kept": 0, "baseline_tests": len(passing), "baseline_s": round(baseline.seconds, 2)}
    kept_functions: set[tuple[str, str]] = set()
    seen_sources: set[str] = set()
    for m in candidates:
        if counts["tried"] >= cfg.max_candidates or counts["kept"] >= cfg.max_tasks:
            break
        if cfg.one_per_function and (m.path, m.function) in kept_functions:
            continue
        buggy = apply_mutation(sources[m.path], m)
        if buggy is None or buggy in seen_sources:
            continue  # no faithful single edit, or the same bug as one already tried
        seen_sources.add(buggy)
        counts["tried"] += 1
        target = os.path.join(cfg.workspace, m.path)
        try:
            with open(target, "w", encoding="utf-8") as f:
                f.write(buggy)
            run = run_tests(cfg, timeout_s=limit)
        finally:
            with open(target, "w", encoding="utf-8") as f:
                f.write(sources[m.path])
        rec = {"id": f"{cfg.project}-{m.id}", "path": m.path, "function": m.function, "kind": m.kind, "variant": m.variant, "lineno": m.lineno, "test_s": round(run.seconds, 2)}
        # A test skipped under the bug is neither: it would not fail the empty patch.
        failing = [n for n in passing if run.outcomes.get(n, ("missing", ""))[0] in ("failed", "missing")]
        skipped = {n for n in passing if run.outcomes.get(n, ("", ""))[0] == "skipped"}
        if run.timed_out:
            rec.update(status="rejected", reason="timeout")
        elif run.collect_errors or run.exit in (2, 3, 4):
            rec.update(status="rejected", reason="tests_do_not_collect")
        elif not failing:
            rec.update(status="rejected", reason="no_failing_test")
        elif len(failing) > cfg.max_failing:
            rec.update(status="rejected", reason="too_many_failing", failing=len(failing))
        else:
            files = {_test_file(n) for n in failing}
            p2p = [n for n in passing if n not in set(failing) and n not in skipped and _test_file(n) in files]
            # The tree is pristine again: the fix must pass its named tests in the verifier's order.
            graded = run_tests(cfg, timeout_s=limit, nodeids=failing + p2p)
            not_passing = [n for n in failing + p2p if graded.outcomes.get(n, ("missing", ""))[0] != "passed"]
            if graded.timed_out or not_passing:
                rec.update(status="rejected", reason="gold_fails_when_graded", not_passing=not_passing[:5])
            else:
                failures = [Failure(nodeid=n, message=run.outcomes.get(n, ("missing", "the test did not run"))[1], explanation=run.explanations.get(n, [])) for n in failing]
                rec.update(
                    status="kept",
                    fail_to_pass=failing,
                    pass_to_pass=p2p,
                    problem_statement=bug_report(cfg.project, version, failures, len(p2p)),
                    patch=unified_diff(m.path, buggy, sources[m.path]),
                    buggy_source=buggy,
                )
                counts["kept"] += 1
                kept_functions.add((m.path, m.function))
        out.write(json.dumps(rec, sort_keys=True) + "\n")
        out.flush()
        print(f"{rec['id']}: {rec['status']} {rec.get('reason', '')} ({run.seconds:.1f}s)", file=sys.stderr, flush=True)
    return counts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python3 -I -c BOOTSTRAP CONFIG.json OUT.jsonl", file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        raw = json.load(f)
    version = raw.pop("version")
    cfg = MineConfig(**raw)
    with open(args[1], "w", encoding="utf-8") as out:
        counts = mine(cfg, version, out)
    print(json.dumps({"summary": counts}), flush=True)
    return 0
