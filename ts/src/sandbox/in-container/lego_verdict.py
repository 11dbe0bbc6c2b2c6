"""pytest plugin the grading runner injects (PYTEST_ADDOPTS=-p lego_verdict).

Copied root-owned into the grading container's system site-packages, it is
imported at `-p` time, before any conftest, test module or code under test.
What it does then cannot be undone by code imported later:

  1. reads this session's token from the runner's token pipe and closes the
     pipe; the token and the report fd live only in closures (no module
     global, and the module leaves sys.modules once pytest has registered it);
  2. reports pytest's own view of the session to the runner over the report
     pipe: start, the collected node ids, every phase of every test, finish
     (a collected test that never reports counts as failed).
     Records are numbered; after `finish` the pipe is closed. The runner
     rejects records out of order, duplicated, for tests never collected, or
     after the finish, so forged records are visible (see grader_runner.py);
  3. keeps the standard library ahead of everything else on sys.path at every
     import (an audit hook on the "import" event), so a workspace file named
     like a stdlib module is never imported in its place, however pytest's
     rootdir, `pythonpath` or import mode arranged sys.path;
  4. watches for tampering: functions and classes of pytest, pluggy, json,
     builtins and unittest rebound after this import (checked when the
     collection ends, after a test's teardown at most every 0.1 s, and at the
     finish); the hook machinery changed, or joined by code that is not what
     a root-owned file compiles to (lego_verdict_trust.py); and, just before
     each test's call and before its report, that test: the item pytest
     collected, unchanged, running its own file's code, called from pytest's
     own frames. An audit hook sees swapped code, trace functions and signals
     to the runner at once. Every finding sends a `tamper` record: a record
     already in the pipe cannot be taken back.
Code under test runs in this process and can in principle defeat all of it
(docs/sandbox.md, "What remains possible"); the aim is that no short or
accidental path works and that the long ones leave a trace.
"""


def _install():
    import json
    import os
    import re
    import sys
    import sysconfig
    import time

    raw = os.environ.pop("LEGO_VERDICT", None)
    if raw is None:
        return None
    cfg = json.loads(raw)
    wfd, rfd = cfg["fds"]
    runner_pid = int(cfg["runner_pid"])
    workspace = cfg.get("workspace", "/workspace").rstrip("/") + "/"
    # Where a test may inherit its method from (a mixin in another protected test file, the hidden tests).
    test_roots = (workspace, "/tests/")
    try:
        token = os.read(rfd, 33).decode().strip()
        os.close(rfd)
        os.set_inheritable(wfd, False)
    except OSError:
        return None
    import gc
    import types
    import unittest  # watched below: its assertions decide unittest-style tests
    from functools import cached_property

    import lego_verdict_trust

    trust = lego_verdict_trust.make_trust()
    sys.modules.pop("lego_verdict_trust", None)
    root_owned, trusted_code, trusted_function, trusted_value, runs_its_file = (
        trust["root_owned"], trust["trusted_code"], trust["trusted_function"], trust["trusted_value"], trust["runs_its_file"])
    state = {"seq": 0, "open": True, "checked": 0.0}
    CHECK_EVERY_S = 0.1
    # Everything the reporting path calls is bound now, from C where it can be:
    # code under test that rebinds os.write, json.dumps or a builtin later does
    # not reach us (C functions and the methods of str, int, dict cannot be patched).
    from _json import encode_basestring_ascii as quote

    write, close_fd, monotonic = os.write, os.close, time.monotonic
    _type, _str, _getattr, _isinstance, _vars, _list, _id, _any, _callable = type, str, getattr, isinstance, vars, list, id, any, callable
    CodeType, FunctionType = types.CodeType, types.FunctionType
    # gc.callbacks is the list the collector calls (rebinding the name does not replace it); none may join but trusted code's.
    gc_callbacks, gc_base, gettrace, getprofile = gc.callbacks, list(gc.callbacks), sys.gettrace, sys.getprofile
    int_repr = int.__repr__

    def encode(v):
        t = _type(v)
        if v is None or t is bool:
            return "null" if v is None else ("true" if v else "false")
        if t is int:
            return int_repr(v)
        if t is list:
            return "[" + ",".join([encode(x) for x in v]) + "]"
        if t is dict:
            return "{" + ",".join([quote(k) + ":" + encode(x) for k, x in v.items()]) + "}"
        return quote(v if t is str else _str(v))

    def send(record):
        if not state["open"]:
            return
        record["t"] = token
        record["seq"] = state["seq"]
        state["seq"] += 1
        try:
            write(wfd, (encode(record) + "\n").encode())
        except OSError:
            state["open"] = False

    def tamper(what):
        # Every time, not once: a "seen already" flag is one dict write away from silencing every check.
        send({"event": "tamper", "what": what})
        return True

    def close():
        state["open"] = False
        try:
            close_fd(wfd)
        except OSError:
            pass

    # ── integrity of the reporting path: every callable of pytest, pluggy (and json,
    # which pytest plugins use to write reports), by identity
    watched = ("pytest", "_pytest", "pluggy", "json", "builtins", "unittest", __name__)
    IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: C types whose attributes cannot be set

    def is_watched(modname):
        return _isinstance(modname, _str) and (modname in watched or modname.split(".", 1)[0] in watched)

    snapshot = []
    seen_classes = set()  # `pytest` re-exports classes of `_pytest.*`: each class once
    for name, mod in list(sys.modules.items()):
        if mod is None or not is_watched(name) or name == __name__:
            continue
        d = vars(mod)
        for key, value in list(d.items()):
            if callable(value):
                snapshot.append((d, key, value, f"{name}.{key}"))
            if (isinstance(value, type) and not value.__flags__ & IMMUTABLE and is_watched(getattr(value, "__module__", None))
                    and id(value) not in seen_classes):
                seen_classes.add(id(value))
                cd = vars(value)
                for ckey, cvalue in list(cd.items()):
                    if callable(cvalue) or isinstance(cvalue, (staticmethod, classmethod, property)):
                        snapshot.append((cd, ckey, cvalue, f"{value.__module__}.{value.__qualname__}.{ckey}"))

    # What runs a test and decides its report, checked around every test (the rest at most every CHECK_EVERY_S).
    critical_modules = ("_pytest.runner", "_pytest.python", "_pytest.unittest", "_pytest.fixtures", "_pytest.reports",
                        "_pytest.skipping", "_pytest.outcomes", "_pytest.main", "_pytest.nodes", "pluggy", "builtins", "unittest.case")
    critical = [e for e in snapshot if _any(e[3] == m or e[3].startswith(m + ".") for m in critical_modules)]

    def check_integrity(entries=snapshot):
        for d, key, value, where in entries:
            if d.get(key) is not value:  # dict.get: a C method
                return tamper(f"{where} was rebound")
        return False

    # Code objects of everything snapshotted (and of this plugin): frames running them are pytest's own.
    trusted_ids = set()
    trusted_keep = []

    def add_code(code):
        stack = [code]
        while stack:
            c = stack.pop()
            if _id(c) not in trusted_ids:
                trusted_ids.add(_id(c))
                trusted_keep.append(c)
                stack.extend(k for k in c.co_consts if _type(k) is CodeType)

    for _d, _key, value, _where in snapshot:
        for f in (value, _getattr(value, "__func__", None), _getattr(value, "fget", None)):
            if _type(f) is FunctionType:
                add_code(f.__code__)
    add_code(sys._getframe(0).f_code)

    def trusted_frame_code(code):
        return _id(code) in trusted_ids or trusted_code(code)

    module_type = _type(sys)

    def accept_installed_patches():
        # pytest patches itself while configuring (legacypath, for one), and so
        # may installed plugins: not tampering. A rebinding by workspace code
        # (imported by an initial conftest, which runs before this point) is.
        for i, (d, key, value, where) in enumerate(snapshot):
            new = d.get(key)
            if new is value:
                continue
            if trusted_value(new):
                snapshot[i] = (d, key, new, where)
                for f in (new, _getattr(new, "__func__", None), _getattr(new, "fget", None)):
                    if _type(f) is FunctionType:
                        add_code(f.__code__)
            else:
                tamper(f"{where} was rebound before the session")

    # ── the hook machinery: as it was when the session started, but for what root-owned code adds
    def may_join(plugin, function=None):
        # A plugin's hooks must be code of a root-owned file (the image, /tests, a protected
        # conftest): a module merely named conftest.py, or a class named after pytest, is not.
        if function is not None:
            return trusted_function(function)
        if _isinstance(plugin, module_type):
            return root_owned(_str(_getattr(plugin, "__file__", "") or ""))
        return trusted_value(_type(plugin))

    hooks = {}  # name -> (caller, its attributes, {id(impl): (impl, its attributes)})
    pm_of = {}
    PROTOCOL = ("pytest_runtest_protocol", "pytest_runtest_logstart", "pytest_runtest_setup", "pytest_runtest_call",
                "pytest_pyfunc_call", "pytest_runtest_teardown", "pytest_runtest_makereport", "pytest_runtest_logreport",
                "pytest_runtest_logfinish", "pytest_fixture_setup", "pytest_report_teststatus", "pytest_runtestloop")

    def record_hooks(pm):
        pm_of["pm"], pm_of["attrs"] = pm, {k: v for k, v in _vars(pm).items() if _callable(v)}
        for name, caller in _list(_vars(pm.hook).items()):
            impls = caller.get_hookimpls() if _getattr(caller, "get_hookimpls", None) else []
            # pluggy's call_extra swaps the implementation lists for a moment (pytest_generate_tests): their content is checked, not their identity.
            attrs = {k: v for k, v in _vars(caller).items() if k not in ("_wrappers", "_nonwrappers")}
            hooks[name] = (caller, attrs, {_id(i): (i, dict(_vars(i))) for i in impls})
        pm_of["caller_type"] = _type(pm.hook.pytest_runtest_call)

    def check_hook(name, caller):
        base = hooks.get(name)
        if base is None:  # a hook first named during the session (a conftest's pytest_addhooks)
            if _type(caller) is not pm_of["caller_type"]:
                return tamper(f"hook {name} is not a hook caller")
            for impl in caller.get_hookimpls():
                if not may_join(impl.plugin, impl.function):
                    return tamper(f"hook {impl.function.__qualname__!s:.80} added during the session")
            return False
        if caller is not base[0]:
            return tamper(f"hook {name} was replaced")
        now = _vars(caller)
        for k, v in base[1].items():
            if now.get(k) is not v:
                return tamper(f"hook {name}: {k} was rebound")
        impls = caller.get_hookimpls()
        ids = {_id(i) for i in impls}
        for iid, (impl, attrs) in base[2].items():
            if iid not in ids:
                return tamper(f"hook {name}: an implementation was removed")
            iv = _vars(impl)
            for k, v in attrs.items():
                if iv.get(k) is not v:
                    return tamper(f"hook {name}: {k} of an implementation was rebound")
        for impl in impls:
            if _id(impl) not in base[2] and not may_join(impl.plugin, impl.function):
                return tamper(f"hook {impl.function.__qualname__!s:.80} added during the session")
        return False

    def check_hooks(names=None):
        pm = pm_of["pm"]
        for k, v in pm_of["attrs"].items():
            if _vars(pm).get(k) is not v:
                return tamper(f"the plugin manager's {k} was rebound")
        relay = _vars(pm.hook)
        for name in names or _list(relay):
            if name in relay and check_hook(name, relay[name]):
                return True
            if name not in relay and name in hooks:
                return tamper(f"hook {name} was removed")
        return False

    # ── every test, just before pytest calls it: the item pytest collected, unchanged,
    # running its file's own code, from pytest's own call chain
    items = {}  # id(item) -> (item, nodeid, type, session, config, parent, path, qualified name)
    attested = {}
    missing = object()

    def record_items(session):
        for item in session.items:
            cls = _getattr(item, "cls", None)
            qual = (cls.__qualname__ + "." if cls is not None else "") + (_getattr(item, "originalname", None) or item.name)
            items[_id(item)] = (item, item.nodeid, _type(item), item.session, item.config, item.parent, _str(item.path), qual)

    def overridden(item):
        # An instance attribute in place of a method or property of its class (`item.runtest = ...`).
        for key in _list(_vars(item)):
            for klass in _type(item).__mro__:
                v = _vars(klass).get(key, missing)
                if v is not missing:
                    if _type(v) is not cached_property and (_callable(v) or _isinstance(v, (property, staticmethod, classmethod))):
                        return key
                    break
        return None

    def check_item(item):
        rec = items.get(_id(item))
        if rec is None or rec[0] is not item:
            return tamper(f"{item.nodeid!s:.200} is not an item pytest collected")
        _, nodeid, t, session, config, parent, path, qual = rec
        if (item.nodeid != nodeid or _type(item) is not t or item.session is not session or item.config is not config
                or item.parent is not parent or _str(item.path) != path):
            return tamper(f"{nodeid:.200}: the item was changed after collection")
        key = overridden(item)
        if key is not None:
            return tamper(f"{nodeid:.200}: {key} is overridden on the item")
        if path.endswith(".py"):
            fns = [item.obj]
            case = _vars(item).get("_testcase")  # unittest: the TestCase runs getattr(case, name)
            if case is not None:
                fns.append(_getattr(case, item.name, None))
            for fn in fns:
                if not runs_its_file(fn, path, qual, test_roots):
                    return tamper(f"{nodeid:.200} does not run the code of {path:.200}")
        return False

    def check_call_chain(nodeid):
        f = getframe(1)
        for _ in range(64):
            if f is None:
                break
            code = f.f_code
            if not trusted_frame_code(code):
                return tamper(f"{nodeid:.200} is run by {code.co_qualname!s:.80} of {code.co_filename!s:.120}")
            if code.co_name == "pytest_runtestloop":
                return False
            f = f.f_back
        return tamper(f"{nodeid:.200} ran outside pytest's test loop")

    def check_globals():
        for what, fn in (("trace", gettrace()), ("profile", getprofile())):
            if fn is not None and not trusted_function(fn) and not trusted_value(_type(fn)):
                return tamper(f"a {what} function of the code under test is set")
        for cb in gc_callbacks:
            if not _any(cb is b for b in gc_base) and not trusted_function(cb):
                return tamper("a garbage-collector callback of the code under test is set")
        return False

    def attest(item):
        (check_item(item) or check_integrity(critical) or check_hooks(PROTOCOL) or check_call_chain(item.nodeid)
         or check_globals())
        attested["nodeid"] = item.nodeid

    # ── import hygiene: the standard library first, at every import
    std = {os.path.realpath(p) for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]) if p}
    std_dirs = tuple(std)

    known = {}
    realpath, sep = os.path.realpath, os.sep

    def is_std(entry):
        if not _isinstance(entry, _str) or not entry:
            return False
        hit = known.get(entry)
        if hit is None:
            real = realpath(entry)
            hit = _any(real == s or real.startswith(s + sep) for s in std_dirs) or (real.endswith(".zip") and "python3" in real)
            known[entry] = hit
        return hit

    def stdlib_first():
        path = sys.path
        seen_other = False
        for entry in path:
            if is_std(entry):
                if seen_other:
                    path[:] = [e for e in path if is_std(e)] + [e for e in path if not is_std(e)]
                    return
            else:
                seen_other = True

    # ── history probes by the code under test (monitoring: the image has no future to find)
    spawns = ("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec")
    mentions_git = re.compile(r"\bgit\b").search
    getframe = sys._getframe

    def from_code_under_test():
        # The innermost frame in the workspace or in /tests decides: hidden tests,
        # and protected workspace tests (tests/, test_*.py, conftest.py), may use git.
        f = getframe(2)
        while f is not None:
            name = f.f_code.co_filename
            if name.startswith("/tests/"):
                return False
            if name.startswith(workspace):
                rel = name[len(workspace):]
                base = rel.rsplit("/", 1)[-1]
                testish = base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py"
                return not (testish or rel.startswith(("tests/", "test/")) or "/tests/" in rel or "/test/" in rel)
            f = f.f_back
        return False

    def probe(what):
        if len(state.setdefault("probes", [])) < 8 and from_code_under_test():
            state["probes"].append(what)
            send({"event": "probe", "what": what[:200]})

    signals = ("os.kill", "os.killpg")
    swaps = ("__code__", "__class__", "__defaults__", "__kwdefaults__")
    tracers = ("sys.settrace", "sys.setprofile")

    def audit(event, args):
        if event == "import":
            stdlib_first()
        elif event == "open":
            target = args[0]
            if _isinstance(target, _str) and "/.git" in target:
                probe(f"open {target}")
        elif event in spawns:
            argv = [args[0]] if event == "os.system" else args[1]
            cmd = " ".join([a.decode("utf-8", "replace") if _isinstance(a, bytes) else _str(a) for a in (argv or [])])
            if mentions_git(cmd):
                probe(cmd)
        elif event in signals:
            pid = args[0]
            if pid in (runner_pid, -runner_pid, 1, -1):
                tamper(f"{event}({pid}, {args[1]}) aimed at the grading runner")
        elif event == "object.__setattr__" and args[1] in swaps:
            target = args[0]
            # pytest's, an installed module's or a test's own function (or object) changed from untrusted code.
            mine = (is_watched(_getattr(target, "__module__", None)) or is_watched(_getattr(_type(target), "__module__", None))
                    or (_type(target) is FunctionType and root_owned(target.__code__.co_filename))
                    or (_isinstance(target, module_type) and root_owned(_str(_getattr(target, "__file__", "") or ""))))
            if mine and not trusted_frame_code(getframe(1).f_code):
                tamper(f"{args[1]} of {_getattr(target, '__qualname__', _type(target).__name__)!s:.80} swapped")
        elif event in tracers and not trusted_frame_code(getframe(1).f_code):
            tamper(f"{event} by {getframe(1).f_code.co_filename!s:.120}")

    sys.addaudithook(audit)
    stdlib_first()

    # ── the hooks pytest calls
    import pytest

    from pathlib import Path
    from _pytest.assertion.rewrite import _rewrite_test

    @pytest.hookimpl(trylast=True)
    def pytest_configure(config):
        accept_installed_patches()
        # Test modules and conftests compile as pytest's assertion rewriter compiles them.
        trust["rewriter"]["rewrite"] = lambda path: _rewrite_test(Path(path), config)[1]
        sys.modules.pop(__name__, None)

    @pytest.hookimpl(trylast=True)  # after the plugins that register helpers at session start (FixtureManager)
    def pytest_sessionstart(session):
        state["started"] = True
        record_hooks(session.config.pluginmanager)
        send({"event": "start", "pid": os.getpid()})

    def pytest_plugin_registered(plugin, manager):
        # Once the session runs, only root-owned code may join (conftests pytest
        # loads, installed plugins): workspace code registering one is the code
        # under test adding hooks (say, one that drops failing tests).
        if state.get("started") and not may_join(plugin):
            tamper(f"plugin {_getattr(plugin, '__name__', _type(plugin).__name__)!s:.80} registered during the session")

    def pytest_collection_finish(session):
        check_integrity()
        check_hooks()
        record_items(session)
        send({"event": "collected", "nodeids": [item.nodeid for item in session.items]})

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(item):
        attest(item)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_makereport(item, call):
        # The test's own code (and the code under test in it) has run: what turns
        # its outcome into a report must still be pytest's.
        if call.when == "call":
            check_item(item) or check_integrity(critical) or check_hooks(PROTOCOL) or check_globals()
        outcome = yield
        if call.when == "call" and call.excinfo is not None:
            try:
                passed = outcome.get_result().outcome == "passed"
            except BaseException:
                passed = False
            if passed:
                tamper(f"{item.nodeid!s:.200} raised, and its report says passed")

    def pytest_runtest_logreport(report):
        if report.when == "call":
            if attested.pop("nodeid", None) != report.nodeid:
                tamper(f"{report.nodeid!s:.200} was called without the reporter's checks")
        # After teardown the tests' own monkeypatches are undone; the full check costs
        # ~1-2 ms, so between the collection's and the finish's one at most every CHECK_EVERY_S.
        elif report.when == "teardown" and monotonic() - state["checked"] >= CHECK_EVERY_S:
            state["checked"] = monotonic()
            check_integrity() or check_hooks()
        send({"event": "test", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome})

    def pytest_sessionfinish(session, exitstatus):
        check_integrity() or check_hooks()
        send({"event": "finish", "exitstatus": int(exitstatus)})
        close()

    return {
        "pytest_configure": pytest_configure,
        "pytest_sessionstart": pytest_sessionstart,
        "pytest_plugin_registered": pytest_plugin_registered,
        "pytest_collection_finish": pytest_collection_finish,
        "pytest_runtest_call": pytest_runtest_call,
        "pytest_runtest_makereport": pytest_runtest_makereport,
        "pytest_runtest_logreport": pytest_runtest_logreport,
        "pytest_sessionfinish": pytest_sessionfinish,
    }


_hooks = _install()
if _hooks is not None:
    globals().update(_hooks)
del _hooks, _install
