"""What code the verdict plugin trusts: the code a root-owned file compiles to.

Imported by lego_verdict at `-p` time (before any code under test) and then
dropped from sys.modules; everything it calls is bound here, at import.

In grading, root owns the image (pytest, pluggy, the standard library,
installed plugins), the hidden tests in /tests and the workspace's protected
files (re-written root-owned); everything the agent wrote is uid 1000, and
the code under test, running as uid 1000, cannot make a root-owned file. A
function is trusted when its code object equals one that its file (root-owned)
compiles to, under the same qualified name: a name (`__module__`, a forged
`co_filename`) proves nothing, the compiled code does. Files are compiled as
Python's importer does and, for test modules and conftests, as pytest's
assertion rewriter does; each once.
"""


def make_trust():
    import ast
    import builtins
    import os
    import stat
    import types

    _open, _compile, _type, _getattr, _isinstance, _any, _all, _str, _vars = (
        builtins.open, builtins.compile, type, getattr, isinstance, any, all, str, vars)
    builtins_dict = vars(builtins)
    os_stat, is_reg = os.stat, stat.S_ISREG
    parse, walk = ast.parse, ast.walk
    FunctionDef, AsyncFunctionDef, ClassDef = ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef
    Attribute, Call, Name = ast.Attribute, ast.Call, ast.Name
    CodeType, FunctionType, MethodType = types.CodeType, types.FunctionType, types.MethodType
    trees = {}  # path -> (codes by qualname, qualnames of defs with a wrapping decorator, qualnames defined)
    owned = {}  # path -> bool
    rewriter = {}  # "rewrite": path -> code, once pytest is configured

    def root_owned(path):
        hit = owned.get(path)
        if hit is None:
            try:
                st = os_stat(path)
                hit = st.st_uid == 0 and is_reg(st.st_mode)
            except (OSError, ValueError, TypeError):
                hit = False
            owned[path] = hit
        return hit

    def marks_only(decorator):
        # `@pytest.mark.x(...)` and `@mark.x` return the function itself; anything else may wrap it.
        node = decorator.func if _isinstance(decorator, Call) else decorator
        names = []
        while _isinstance(node, Attribute):
            names.append(node.attr)
            node = node.value
        if _isinstance(node, Name):
            names.append(node.id)
        names.reverse()
        return names[:2] == ["pytest", "mark"] or names[:1] == ["mark"]

    def defs_of(tree):
        wrapped, defined = set(), set()

        def visit(body, prefix):
            for node in body:
                if _isinstance(node, (FunctionDef, AsyncFunctionDef)):
                    qual = prefix + node.name
                    defined.add(qual)
                    if not _all(marks_only(d) for d in node.decorator_list):
                        wrapped.add(qual)
                elif _isinstance(node, ClassDef):
                    visit(node.body, prefix + node.name + ".")

        visit(tree.body, "")
        return wrapped, defined

    def tree_of(path):
        hit = trees.get(path)
        if hit is not None:
            return hit
        codes, wrapped, defined = {}, set(), set()
        try:
            with _open(path, "rb") as f:
                source = f.read()
            roots = [_compile(source, path, "exec", dont_inherit=True)]
            wrapped, defined = defs_of(parse(source, path))
            rewrite = rewriter.get("rewrite")
            if rewrite is not None:
                try:
                    roots.append(rewrite(path))
                except Exception:  # not rewritable: pytest would not have rewritten it either
                    pass
        except Exception:  # unreadable or not Python: nothing in it is trusted
            roots = []
        stack = roots
        while stack:
            code = stack.pop()
            codes.setdefault(code.co_qualname, []).append(code)
            stack.extend(k for k in code.co_consts if _type(k) is CodeType)
        hit = trees[path] = (codes, wrapped, defined)
        return hit

    def genuine(code, path=None):
        """Whether `code` is what `path` (by default its own co_filename) compiles to, under its qualified name."""
        if _type(code) is not CodeType:
            return False
        return _any(c == code for c in tree_of(path or code.co_filename)[0].get(code.co_qualname, ()))

    def trusted_code(code):
        return _type(code) is CodeType and root_owned(code.co_filename) and genuine(code)

    def trusted_function(fn):
        if _type(fn) is MethodType:
            fn = fn.__func__
        return _type(fn) is FunctionType and trusted_code(fn.__code__)

    def trusted_value(value):
        """A callable, descriptor, class or module that root-owned code defines (pytest's and installed plugins' patches)."""
        t = _type(value)
        if t is FunctionType or t is MethodType:
            return trusted_function(value)
        if t is staticmethod or t is classmethod:
            return trusted_function(value.__func__)
        if t is property:
            return _all(f is None or trusted_function(f) for f in (value.fget, value.fset, value.fdel))
        if t is types.ModuleType:
            return root_owned(_str(_getattr(value, "__file__", "") or ""))
        if _isinstance(value, type):
            # A class is as trusted as its methods; one without Python methods (a C type) by its module.
            methods = [v for v in _vars(value).values() if _type(v) in (FunctionType, staticmethod, classmethod, property)]
            return _all(trusted_value(m) for m in methods) if methods else value.__module__ in ("builtins",)
        return False

    def inherited(fn, name, test_roots):
        for _ in range(16):
            if _type(fn) is not FunctionType:
                return False
            code = fn.__code__
            if (code.co_name == name and _any(_str(code.co_filename).startswith(r) for r in test_roots)
                    and trusted_code(code)):
                return fn.__builtins__ is builtins_dict
            fn = _getattr(fn, "__wrapped__", None)
        return False

    def runs_its_file(fn, path, qualname, test_roots=()):
        """
        Whether the test function `fn` of the item defined as `qualname` in
        `path` runs that file's own code: the function itself, or, for a test
        the file decorates with something other than marks, a function its
        `__wrapped__` chain reaches (the decorator's wrapper is not checked).
        A test the file does not define by that name (made in a loop, by a
        factory) needs code of that file; or, inherited from a mixin or base
        class of another test file (cachetools' `CacheTestMixin` in
        tests/__init__.py), the method of that name as a root-owned file under
        one of `test_roots` (the workspace's re-written protected files, the
        hidden tests) compiles it: the agent can neither write such a file nor
        forge a code object equal to one compiled from it.
        """
        if _type(fn) is MethodType:
            fn = fn.__func__
        if _type(fn) is not FunctionType:
            return True  # not a plain function (a doctest, a plugin's item): nothing to compare
        codes, wrapped, defined = tree_of(path)
        if qualname not in defined:
            return genuine(fn.__code__, path) or inherited(fn, qualname.rpartition(".")[2], test_roots)
        for _ in range(16):
            if _type(fn) is FunctionType and fn.__code__.co_qualname == qualname and genuine(fn.__code__, path):
                return fn.__builtins__ is builtins_dict
            if qualname not in wrapped:
                return False
            fn = _getattr(fn, "__wrapped__", None)
        return False

    return {
        "root_owned": root_owned,
        "genuine": genuine,
        "trusted_code": trusted_code,
        "trusted_function": trusted_function,
        "trusted_value": trusted_value,
        "runs_its_file": runs_its_file,
        "rewriter": rewriter,
    }
