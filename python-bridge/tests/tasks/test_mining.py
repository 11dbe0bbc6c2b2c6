"""The miner's pieces without Docker: which mutations exist, that each is one faithful edit,
that the order is fixed by the seed, that patches apply, and how bug reports read."""

from __future__ import annotations

import ast
import random
import subprocess

from lego_rl.tasks import Mutation, apply_mutation, bug_report, find_mutations
from lego_rl.tasks.mine import unified_diff
from lego_rl.tasks.report import Failure

SOURCE = '''"""A module."""
LIMIT = 10


def clamp(x, lo=0, hi=LIMIT):
    """Clamp x."""
    if x < lo:
        return lo
    elif x > hi:
        return hi
    total = 0
    for i in range(3):
        total += i
    return x if not (x == 3 and total) else max(x, total)


class Box:
    def put(self, a, b):
        if a is None:
            raise ValueError("a")
        self.items.append(a)
        return a + b * 2
'''


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    a, b = before.splitlines(), after.splitlines()
    return [l for l in a if l not in b], [l for l in b if l not in a]


def test_finds_every_kind_in_function_bodies_only():
    kinds = {m.kind for m in find_mutations(SOURCE, "m.py")}
    assert kinds == {"flip_comparison", "flip_boolean", "swap_operator", "off_by_one", "swap_arguments", "drop_statement", "drop_branch", "wrong_return"}
    # LIMIT = 10 and the default hi=LIMIT run at import: never mutated.
    assert all(m.lineno > 4 for m in find_mutations(SOURCE, "m.py"))


def test_each_mutation_is_one_small_edit_that_parses_to_the_mutated_tree():
    for m in find_mutations(SOURCE, "m.py"):
        out = apply_mutation(SOURCE, m)
        assert out is not None, m
        ast.parse(out)
        removed, added = changed_lines(SOURCE, out)
        assert 1 <= len(removed) + len(added) <= 4, (m, removed, added)


def test_examples_of_each_kind():
    by = {(m.kind, m.variant, m.lineno): m for m in find_mutations(SOURCE, "m.py")}
    edit = lambda kind, variant, line: changed_lines(SOURCE, apply_mutation(SOURCE, by[(kind, variant, line)]))
    assert edit("flip_comparison", "Lt->GtE", 7) == (["    if x < lo:"], ["    if x >= lo:"])
    assert edit("drop_branch", "drop else", 7) == (["    elif x > hi:", "        return hi"], [])
    assert edit("off_by_one", "-1", 12) == (["    for i in range(3):"], ["    for i in range(2):"])
    assert edit("drop_branch", "drop guard", 19) == (['        if a is None:', '            raise ValueError("a")'], [])
    assert edit("swap_operator", "Add->Sub", 22) == (["        return a + b * 2"], ["        return a - b * 2"])
    assert edit("flip_boolean", "drop not", 14)[1] == ["    return x if x == 3 and total else max(x, total)"]


def test_the_seed_fixes_the_order_candidates_are_tried_in():
    def order(seed: int) -> list[str]:
        ms = find_mutations(SOURCE, "m.py")
        random.Random(seed).shuffle(ms)
        return [m.id for m in ms]

    assert order(3) == order(3)
    assert order(3) != order(4)
    assert len(set(order(3))) == len(order(3))  # ids are unique


def test_a_mutation_sharing_its_line_is_not_made():
    src = "def f(x):\n    a = 1; b = 2\n    return a + b\n"
    drops = [m for m in find_mutations(src, "m.py") if m.kind == "drop_statement"]
    assert drops and all(apply_mutation(src, m) is None for m in drops)


def test_the_fix_patch_applies_with_git_apply(tmp_path):
    m = next(m for m in find_mutations(SOURCE, "pkg/m.py") if m.kind == "flip_comparison")
    buggy = apply_mutation(SOURCE, m)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/m.py").write_text(buggy)
    patch = unified_diff("pkg/m.py", buggy, SOURCE)
    assert patch.startswith("diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ ")
    subprocess.run(["git", "apply", "-"], input=patch.encode(), cwd=tmp_path, check=True)
    assert (tmp_path / "pkg/m.py").read_text() == SOURCE
    # A file without a final newline gets git's marker, or git apply refuses the patch.
    assert unified_diff("a.py", "x = 1", "x = 2").endswith("+x = 2\n\\ No newline at end of file\n")


def test_a_bug_report_names_the_failing_tests_and_what_came_out_never_the_code():
    failures = [
        Failure(nodeid="tests/test_m.py::test_clamp", message="assert 11 == 10", explanation=["> assert clamp(11) == 10", "E assert 11 == 10", "E +  where 11 = clamp(11)"]),
        Failure(nodeid="tests/test_m.py::test_put", message="ValueError: a", explanation=[]),
    ]
    text = bug_report("mod", "1.0", failures, passing=7)
    assert text.startswith("mod 1.0: `test_clamp` fails\n\nRunning the project's test suite, 2 tests fail:\n\n- `tests/test_m.py::test_clamp`\n- `tests/test_m.py::test_put`\n")
    assert "It gets `11` where `10` is expected." in text
    assert "The other 7 tests in the same test file pass." in text


def test_observed_and_expected_follow_the_side_that_calls_even_without_a_where_line():
    # pytest leaves `where` out of string diffs; the source line shows which side is the call.
    f = Failure(nodeid="t.py::test_s", message="AssertionError: assert 'kine' == 'iine'\n  - iine\n  + kine", explanation=["> assert plural == pluralize(singular)"])
    assert "It gets `'iine'` where `'kine'` is expected." in bug_report("p", "1", [f], passing=1)
    unclear = Failure(nodeid="t.py::test_s", message="assert 'a' == 'b'", explanation=[])
    assert "It gets" not in bug_report("p", "1", [unclear], passing=1)


def test_memory_addresses_never_reach_the_report():
    f = Failure(nodeid="t.py::test_o", message="AssertionError: <Box object at 0x7f3a2b1c> is not None", explanation=[])
    assert "0x7f3a" not in bug_report("p", "1", [f], passing=0)


def test_mutation_ids_depend_on_place_and_kind_only():
    m = Mutation(path="a.py", function="f", kind="off_by_one", lineno=3, node_path=(0, 1), variant="-1")
    assert m.id == Mutation(path="a.py", function="g", kind="off_by_one", lineno=9, node_path=(0, 1), variant="-1").id
    assert m.id.startswith("off_by_one-")


def test_a_bug_whose_fix_fails_its_own_verifier_is_rejected_not_kept(tmp_path):
    """The verifier runs FAIL_TO_PASS before PASS_TO_PASS, not in file order: a test file
    whose tests depend on their order (as six's test_lazy does) yields a fix that fails
    its own named tests, so the candidate is rejected (`gold_fails_when_graded`), while
    the same bug under order-independent tests is kept."""
    import io
    import json

    from lego_rl.tasks import MineConfig
    from lego_rl.tasks.mine import mine

    def mined(tests: str) -> list[dict]:
        work = tmp_path / str(abs(hash(tests)))
        work.mkdir()
        (work / "m.py").write_text("def half(x):\n    return x // 2\n")
        (work / "test_m.py").write_text(tests)
        (work / "pytest.ini").write_text(f"[pytest]\npythonpath = {work}\n")
        cfg = MineConfig(project="p", workspace=str(work), sources=["m.py"], max_candidates=10, max_tasks=10, pytest_ini=str(work / "pytest.ini"))
        out = io.StringIO()
        mine(cfg, "1.0", out)
        return [json.loads(line) for line in out.getvalue().splitlines()]

    # File order: test_a_fresh (colorsys not imported yet) passes, then test_half imports it.
    # Graded order: test_half (FAIL_TO_PASS) first, so test_a_fresh (PASS_TO_PASS) fails on the fix.
    order_dependent = (
        "import sys\nimport m\n\n\ndef test_a_fresh():\n    assert 'colorsys' not in sys.modules\n\n\n"
        "def test_half():\n    import colorsys\n    assert m.half(9) == 4\n"
    )
    tried = mined(order_dependent)
    assert tried and all(t["status"] == "rejected" for t in tried)
    failing_ones = [t for t in tried if t["reason"] == "gold_fails_when_graded"]
    assert failing_ones and all(t["not_passing"] == ["test_m.py::test_a_fresh"] for t in failing_ones)
    independent = order_dependent.replace("'colorsys' not in sys.modules", "'m' in sys.modules")
    assert any(t["status"] == "kept" for t in mined(independent))
