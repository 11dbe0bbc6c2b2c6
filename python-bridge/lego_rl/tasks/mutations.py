"""Procedural bugs in a module's functions, found and applied with `ast`.

Kinds (each a small, plausible slip a person makes):
  flip_comparison   `<` ↔ `>=`, `<=` ↔ `>`, `==` ↔ `!=`, `in` ↔ `not in`, `is` ↔ `is not`
  flip_boolean      `and` ↔ `or`; `not x` → `x`
  swap_operator     `+` ↔ `-`, `*` ↔ `//` (integer code), `*` ↔ `/`
  off_by_one        an integer constant n → n - 1 (n > 0) or n + 1
  swap_arguments    the first two positional arguments of a call
  drop_statement    an expression statement or assignment in a body of two or more
  drop_branch       an `else`/`elif` branch, or a guard `if …: return/raise`
  wrong_return      `return x` → `return None`; `return True` ↔ `return False`

Only function bodies are touched (module-level code runs at import, where a
bug would stop collection rather than fail a test). A mutation is applied to
the source text in place — just the node's span, so the diff is one line or
a few — and kept only if the result parses to exactly the mutated tree.
"""

from __future__ import annotations

import ast
import copy
import hashlib
from dataclasses import dataclass

_COMPARE_FLIP = {
    ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_BINOP_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult}


@dataclass(frozen=True, slots=True)
class Mutation:
    """One bug to introduce: where, what kind, and the path to the node in the tree."""

    path: str
    """File, relative to the workspace."""
    function: str
    """Qualified name of the enclosing function (`Class.method`)."""
    kind: str
    lineno: int
    """Line of the mutated node (1-based), for the task's metadata."""
    node_path: tuple[int, ...]
    """Indices from the module down to the node, through `ast.iter_child_nodes` order."""
    variant: str
    """What replaces it, in words (`Lt->GtE`, `drop`, `return None`)."""

    @property
    def id(self) -> str:
        key = f"{self.path}:{self.node_path}:{self.kind}:{self.variant}"
        return f"{self.kind}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def _children(node: ast.AST) -> list[ast.AST]:
    return list(ast.iter_child_nodes(node))


def _walk_functions(tree: ast.Module):
    """(function qualname, function node, path to it) for every function, methods and nested ones included."""
    def visit(node: ast.AST, path: tuple[int, ...], prefix: str):
        for i, child in enumerate(_children(node)):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child, path + (i,)
                yield from visit(child, path + (i,), f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, path + (i,), f"{prefix}{child.name}.")
            elif isinstance(child, (ast.If, ast.Try, ast.With)) and not prefix:
                yield from visit(child, path + (i,), prefix)  # functions defined under a module-level guard
    yield from visit(tree, (), "")


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _variants(node: ast.AST, parent: ast.AST | None) -> list[tuple[str, str]]:
    """(kind, variant) pairs that apply to this node."""
    out: list[tuple[str, str]] = []
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE_FLIP:
        out.append(("flip_comparison", f"{type(node.ops[0]).__name__}->{_COMPARE_FLIP[type(node.ops[0])].__name__}"))
    elif isinstance(node, ast.BoolOp):
        out.append(("flip_boolean", "And->Or" if isinstance(node.op, ast.And) else "Or->And"))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        out.append(("flip_boolean", "drop not"))
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAP:
        out.append(("swap_operator", f"{type(node.op).__name__}->{_BINOP_SWAP[type(node.op)].__name__}"))
    elif isinstance(node, ast.Constant) and type(node.value) is int and not isinstance(parent, ast.Slice):
        out.append(("off_by_one", "-1" if node.value > 0 else "+1"))
    elif isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
        out.append(("swap_arguments", "args 0<->1"))
    elif isinstance(node, ast.Return) and node.value is not None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool):
            out.append(("wrong_return", f"return {not node.value.value}"))
        elif not (isinstance(node.value, ast.Constant) and node.value.value is None):
            out.append(("wrong_return", "return None"))
    if isinstance(node, ast.If):
        if node.orelse:
            out.append(("drop_branch", "drop else"))
        elif any(isinstance(s, (ast.Return, ast.Raise)) for s in node.body):
            out.append(("drop_branch", "drop guard"))
    if isinstance(node, (ast.Expr, ast.Assign, ast.AugAssign)) and not _is_docstring(node):
        out.append(("drop_statement", "drop"))
    return out


def find_mutations(source: str, path: str) -> list[Mutation]:
    """Every mutation that applies to a function body of `source`, in tree order."""
    tree = ast.parse(source)
    found: list[Mutation] = []
    for qualname, fn, fn_path in _walk_functions(tree):
        # The body only: decorators, defaults and annotations are evaluated at import.
        body_index = _children(fn).index(fn.body[0])

        def visit(node: ast.AST, node_path: tuple[int, ...], parent: ast.AST | None, stmt_siblings: int):
            for kind, variant in _variants(node, parent):
                if kind == "drop_statement" and stmt_siblings < 2:
                    continue
                found.append(Mutation(path=path, function=qualname, kind=kind, lineno=getattr(node, "lineno", fn.lineno), node_path=node_path, variant=variant))
            for i, child in enumerate(_children(node)):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                    continue  # nested functions are visited as functions of their own
                siblings = _siblings(node, child)
                visit(child, node_path + (i,), node, siblings)

        for i, stmt in enumerate(_children(fn)):
            if i < body_index or isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            visit(stmt, fn_path + (i,), fn, len(fn.body))
    return found


def _siblings(parent: ast.AST, child: ast.AST) -> int:
    """How many statements share the body `child` is in (0 if it is not a statement)."""
    for name in ("body", "orelse", "finalbody"):
        block = getattr(parent, name, None)
        if isinstance(block, list) and any(s is child for s in block):
            return len(block)
    return 0


def _node_at(tree: ast.AST, node_path: tuple[int, ...]) -> tuple[ast.AST, ast.AST]:
    parent, node = tree, tree
    for i in node_path:
        parent, node = node, _children(node)[i]
    return parent, node


def _mutated_tree(tree: ast.Module, m: Mutation) -> ast.Module:
    """The tree with the mutation applied (a copy)."""
    t = copy.deepcopy(tree)
    parent, node = _node_at(t, m.node_path)
    if m.kind == "flip_comparison":
        node.ops = [_COMPARE_FLIP[type(node.ops[0])]()]
    elif m.kind == "flip_boolean" and isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif m.kind == "flip_boolean":
        _replace(parent, node, node.operand)
    elif m.kind == "swap_operator":
        node.op = _BINOP_SWAP[type(node.op)]()
    elif m.kind == "off_by_one":
        node.value = node.value - 1 if node.value > 0 else node.value + 1
    elif m.kind == "swap_arguments":
        node.args[0], node.args[1] = node.args[1], node.args[0]
    elif m.kind == "wrong_return":
        node.value = ast.Constant(value=(not node.value.value) if m.variant in ("return True", "return False") else None)
    elif m.kind == "drop_branch" and m.variant == "drop else":
        node.orelse = []
    elif m.kind in ("drop_branch", "drop_statement"):
        _remove(parent, node)
    return t


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return
        if isinstance(value, list):
            for i, v in enumerate(value):
                if v is old:
                    value[i] = new
                    return


def _remove(parent: ast.AST, node: ast.AST) -> None:
    for name in ("body", "orelse", "finalbody"):
        block = getattr(parent, name, None)
        if isinstance(block, list):
            for i, s in enumerate(block):
                if s is node:
                    del block[i]
                    return


def _offset(lines: list[bytes], lineno: int, col: int) -> int:
    """Byte offset in the joined source of (1-based line, byte column): ast columns are UTF-8 byte offsets."""
    return sum(len(line) for line in lines[: lineno - 1]) + col


def apply_mutation(source: str, m: Mutation) -> str | None:
    """The mutated source, edited only at the node's span; None when the edit cannot be made faithfully."""
    tree = ast.parse(source)
    expected = ast.dump(_mutated_tree(tree, m))
    _, node = _node_at(tree, m.node_path)
    raw = source.encode("utf-8")
    lines = raw.splitlines(keepends=True)
    if m.kind == "drop_statement" or (m.kind == "drop_branch" and m.variant == "drop guard"):
        start_line, end_line = node.lineno, node.end_lineno
        before = lines[start_line - 1][: node.col_offset]
        after = lines[end_line - 1][node.end_col_offset :]
        if before.strip() or after.strip().split(b"#")[0].strip():
            return None  # shares its line with another statement
        new = b"".join(lines[: start_line - 1] + lines[end_line:])
    elif m.kind == "drop_branch":
        first = node.orelse[0]
        keyword_line = first.lineno if lines[first.lineno - 1].lstrip().startswith(b"elif") else _else_line(lines, node)
        if keyword_line is None:
            return None
        new = b"".join(lines[: keyword_line - 1] + lines[node.orelse[-1].end_lineno :])
    else:
        target = node
        mutated_tree = _mutated_tree(tree, m)
        _, replacement = _node_at(mutated_tree, m.node_path)
        if m.kind == "flip_boolean" and not isinstance(node, ast.BoolOp):
            replacement = node.operand  # `not x` → the operand's own text, unchanged
            text = ast.get_source_segment(source, replacement)
            if text is None:
                return None
            replacement_src = f"({text})" if "\n" in text else text
        else:
            replacement_src = ast.unparse(replacement)
        start = _offset(lines, target.lineno, target.col_offset)
        end = _offset(lines, target.end_lineno, target.end_col_offset)
        new = raw[:start] + replacement_src.encode("utf-8") + raw[end:]
    try:
        result = new.decode("utf-8")
        if ast.dump(ast.parse(result)) != expected:
            return None
    except (SyntaxError, UnicodeDecodeError):
        return None
    return result


def _else_line(lines: list[bytes], node: ast.If) -> int | None:
    """The line of the `else:` keyword between an if's body and its orelse block."""
    for ln in range(node.body[-1].end_lineno + 1, node.orelse[0].lineno + 1):
        if lines[ln - 1].lstrip().startswith(b"else"):
            return ln
    return None
