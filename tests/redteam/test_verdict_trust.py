"""What the verdict plugin accepts as "the test runs its file's code", pinned on real files.

A test class that inherits its test methods from a mixin in another protected
test file (cachetools' tests: `class TTLCacheTest(unittest.TestCase,
CacheTestMixin)`, the mixin in tests/__init__.py) runs genuine, root-owned code:
it must score like any other test. Reassigning a test to another method, or to
code the agent wrote (uid 1000), must still be refused.
"""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

IN_CONTAINER = Path(__file__).resolve().parents[2] / "ts" / "src" / "sandbox" / "in-container"
AGENT_UID = 1000

MIXIN = '''
class CacheCases:
    def test_missing(self):
        assert {}.get("k") is None

    def test_clear(self):
        assert True
'''
TEST_FILE = '''
import unittest
from tests import CacheCases

class TTLCacheTest(unittest.TestCase, CacheCases):
    def test_own(self):
        assert 1 + 1 == 2
'''
AGENT_CODE = '''
def test_missing(self):
    pass
'''


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def workspace(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.fail("these checks need root: the plugin trusts root-owned files, and set-up runs the suite as root")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text(MIXIN)
    (tmp_path / "tests" / "test_cache.py").write_text(TEST_FILE)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT_CODE)
    os.chown(agent, AGENT_UID, AGENT_UID)
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("tests", None)
    sys.path.insert(0, str(IN_CONTAINER))
    try:
        trust = load("lego_verdict_trust_under_test", IN_CONTAINER / "lego_verdict_trust.py").make_trust()
        package = load("tests", tmp_path / "tests" / "__init__.py")
        test_file = load("tests.test_cache", tmp_path / "tests" / "test_cache.py")
        yield trust, tmp_path, package, test_file, load("agent_code", agent)
    finally:
        sys.path.remove(str(tmp_path))
        sys.path.remove(str(IN_CONTAINER))
        for name in ("tests", "tests.test_cache", "agent_code", "lego_verdict_trust_under_test"):
            sys.modules.pop(name, None)


def test_a_test_inherited_from_a_mixin_in_a_protected_test_file_runs_its_files_code(workspace):
    trust, root, _, test_file, _ = workspace
    path = str(root / "tests" / "test_cache.py")
    roots = (str(root) + "/",)
    assert trust["runs_its_file"](test_file.TTLCacheTest.test_missing, path, "TTLCacheTest.test_missing", roots)
    assert trust["runs_its_file"](test_file.TTLCacheTest.test_own, path, "TTLCacheTest.test_own", roots)


def test_an_inherited_test_outside_the_test_roots_is_refused(workspace):
    trust, root, _, test_file, _ = workspace
    path = str(root / "tests" / "test_cache.py")
    assert not trust["runs_its_file"](test_file.TTLCacheTest.test_missing, path, "TTLCacheTest.test_missing", ("/elsewhere/",))


def test_a_test_pointed_at_another_mixin_method_is_refused(workspace):
    trust, root, package, test_file, _ = workspace
    path = str(root / "tests" / "test_cache.py")
    test_file.TTLCacheTest.test_missing = package.CacheCases.test_clear
    assert not trust["runs_its_file"](test_file.TTLCacheTest.test_missing, path, "TTLCacheTest.test_missing", (str(root) + "/",))


def test_a_test_pointed_at_code_the_agent_wrote_is_refused(workspace):
    trust, root, _, test_file, agent = workspace
    path = str(root / "tests" / "test_cache.py")
    test_file.TTLCacheTest.test_missing = agent.test_missing
    assert not trust["runs_its_file"](test_file.TTLCacheTest.test_missing, path, "TTLCacheTest.test_missing", (str(root) + "/",))
