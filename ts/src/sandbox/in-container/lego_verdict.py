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
  4. watches for tampering with the reporter: functions and classes of pytest
     and pluggy rebound after this import (checked when the collection ends,
     at a test's call phase at most every 0.1 s, and at the finish), a plugin or hook implementation other than a
     conftest's added during the session, a function's code swapped, a signal sent to the runner. Any of these sends a `tamper` record at once: a record already in
     the pipe cannot be taken back.
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
    try:
        token = os.read(rfd, 33).decode().strip()
        os.close(rfd)
        os.set_inheritable(wfd, False)
    except OSError:
        return None
    state = {"seq": 0, "open": True, "tampered": False, "checked": 0.0}
    CHECK_EVERY_S = 0.1
    # Everything the reporting path calls is bound now, from C where it can be:
    # code under test that rebinds os.write, json.dumps or a builtin later does
    # not reach us (C functions and the methods of str, int, dict cannot be patched).
    from _json import encode_basestring_ascii as quote

    write, close_fd, monotonic = os.write, os.close, time.monotonic
    _type, _str, _getattr, _isinstance, _vars, _list, _id, _any = type, str, getattr, isinstance, vars, list, id, any
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
        if not state["tampered"]:
            state["tampered"] = True
            send({"event": "tamper", "what": what})

    def close():
        state["open"] = False
        try:
            close_fd(wfd)
        except OSError:
            pass

    # ── integrity of the reporting path: every callable of pytest, pluggy (and json,
    # which pytest plugins use to write reports), by identity
    watched = ("pytest", "_pytest", "pluggy", "json", __name__)

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
            if isinstance(value, type) and is_watched(getattr(value, "__module__", None)) and id(value) not in seen_classes:
                seen_classes.add(id(value))
                cd = vars(value)
                for ckey, cvalue in list(cd.items()):
                    if callable(cvalue) or isinstance(cvalue, (staticmethod, classmethod, property)):
                        snapshot.append((cd, ckey, cvalue, f"{name}.{key}.{ckey}"))

    def check_integrity():
        for d, key, value, where in snapshot:
            if d.get(key) is not value:  # dict.get: a C method
                tamper(f"{where} was rebound")
                return

    module_type, modules = _type(sys), sys.modules

    def installed(value):
        # Defined by a module of the image (pytest itself, an installed plugin), not of the workspace.
        mod = value if _isinstance(value, module_type) else modules.get(_getattr(value, "__module__", None) or "")
        path = _str(_getattr(mod, "__file__", "") or "")
        return path != "" and not path.startswith(workspace)

    def accept_installed_patches():
        # pytest patches itself while configuring (legacypath, for one), and so
        # may installed plugins: not tampering. A rebinding by workspace code
        # (imported by an initial conftest, which runs before this point) is.
        for i, (d, key, value, where) in enumerate(snapshot):
            new = d.get(key)
            if new is value:
                continue
            if installed(new):
                snapshot[i] = (d, key, new, where)
            else:
                tamper(f"{where} was rebound before the session")

    # ── hook implementations: none may join during the session but a conftest's
    def is_conftest(plugin):
        return _isinstance(plugin, module_type) and _str(_getattr(plugin, "__file__", "")).endswith("conftest.py")

    hook_baseline = set()
    pm_of = {}

    def hook_impls(pm):
        for caller in _list(_vars(pm.hook).values()):
            get = _getattr(caller, "get_hookimpls", None)
            if get is not None:
                yield from get()

    def may_join(plugin, function=None):
        # conftest modules (protected files) and the image's own plugins; never workspace code.
        return is_conftest(plugin) or installed(plugin if _isinstance(plugin, module_type) else _type(plugin)) and (function is None or installed(function))

    def check_hooks(pm):
        for impl in hook_impls(pm):
            if _id(impl) not in hook_baseline and not may_join(impl.plugin, impl.function):
                tamper(f"hook {impl.function.__qualname__!s:.80} added during the session")
                return

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
        elif event == "object.__setattr__" and args[1] == "__code__":
            if is_watched(_getattr(args[0], "__module__", None)):
                tamper(f"code of {_getattr(args[0], '__qualname__', '?')} swapped")

    sys.addaudithook(audit)
    stdlib_first()

    # ── the hooks pytest calls
    import pytest

    @pytest.hookimpl(trylast=True)
    def pytest_configure(config):
        accept_installed_patches()
        sys.modules.pop(__name__, None)

    @pytest.hookimpl(trylast=True)  # after the plugins that register helpers at session start (FixtureManager)
    def pytest_sessionstart(session):
        state["started"] = True
        pm_of["pm"] = session.config.pluginmanager
        hook_baseline.update(id(impl) for impl in hook_impls(session.config.pluginmanager))
        send({"event": "start", "pid": os.getpid()})

    def pytest_plugin_registered(plugin, manager):
        # Once the session runs, only conftests and installed plugins may join:
        # workspace code registering one is the code under test adding hooks
        # (say, one that drops failing tests from the collection).
        if state.get("started") and not may_join(plugin):
            tamper(f"plugin {_getattr(plugin, '__name__', _type(plugin).__name__)!s:.80} registered during the session")

    def pytest_collection_finish(session):
        check_integrity()
        check_hooks(session.config.pluginmanager)
        send({"event": "collected", "nodeids": [item.nodeid for item in session.items]})

    def pytest_runtest_logreport(report):
        # A full check costs ~1-2 ms; between the collection's and the finish's
        # checks, one at most every CHECK_EVERY_S keeps a suite of thousands fast.
        if report.when == "call" and monotonic() - state["checked"] >= CHECK_EVERY_S:
            state["checked"] = monotonic()
            check_integrity()
            check_hooks(pm_of["pm"])
        send({"event": "test", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome})

    def pytest_sessionfinish(session, exitstatus):
        check_integrity()
        check_hooks(session.config.pluginmanager)
        send({"event": "finish", "exitstatus": int(exitstatus)})
        close()

    return {
        "pytest_configure": pytest_configure,
        "pytest_sessionstart": pytest_sessionstart,
        "pytest_plugin_registered": pytest_plugin_registered,
        "pytest_collection_finish": pytest_collection_finish,
        "pytest_runtest_logreport": pytest_runtest_logreport,
        "pytest_sessionfinish": pytest_sessionfinish,
    }


_hooks = _install()
if _hooks is not None:
    globals().update(_hooks)
del _hooks, _install
