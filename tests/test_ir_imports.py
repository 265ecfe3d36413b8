"""The modules of tusk.ir import one another without a cycle (imports inside functions included)."""

from __future__ import annotations

import ast
from pathlib import Path

import tusk.ir

IR = Path(tusk.ir.__file__).parent


def module_names() -> dict[str, Path]:
    """Every module of tusk.ir by dotted name (a package by its ``__init__``)."""
    out = {}
    for path in IR.rglob("*.py"):
        parts = ("tusk", "ir", *path.relative_to(IR).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported(tree: ast.AST) -> list[str]:
    """Dotted names a module imports, anywhere in it but under ``if TYPE_CHECKING:``."""
    out: list[str] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if _type_checking_only(node):
            todo.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names]  # a submodule named in the list
        todo.extend(ast.iter_child_nodes(node))
    return out


def import_graph(names: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the tusk.ir modules it imports.  Importing ``a.b.c`` runs the package ``a.b`` first,
    so a module outside ``a.b`` depends on ``a.b`` too; a module inside it does not (the package is
    already being imported when its own modules run, and ``from a.b import c`` there names ``c``)."""
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        edges = set()
        for target in imported(ast.parse(path.read_text())):
            if target not in names:
                continue
            parts = target.split(".")
            for k in range(3, len(parts) + 1):
                package = ".".join(parts[:k])
                if package in names and not name.startswith(package + "."):
                    edges.add(package)
        edges.discard(name)
        edges.discard("tusk.ir")  # the package's own __init__ is empty
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_a_function_level_import_and_a_package_init_count(tmp_path):
    tree = ast.parse("import os\nif TYPE_CHECKING:\n    from tusk.ir.module import Module\n"
                     "def f():\n    from tusk.ir.bir_json.fields import expect_int\n")
    assert sorted(imported(tree)) == ["os", "tusk.ir.bir_json.fields", "tusk.ir.bir_json.fields.expect_int"]
    names = {"tusk.ir.a": tmp_path / "a.py", "tusk.ir.p": tmp_path / "p.py", "tusk.ir.p.b": tmp_path / "b.py"}
    (tmp_path / "a.py").write_text("def f():\n    from tusk.ir.p.b import x\n")
    (tmp_path / "p.py").write_text("from tusk.ir.p import b\nfrom tusk.ir.a import y\n")
    (tmp_path / "b.py").write_text("from tusk.ir.p import c\n")
    graph = import_graph(names)
    assert graph == {"tusk.ir.a": {"tusk.ir.p", "tusk.ir.p.b"}, "tusk.ir.p": {"tusk.ir.p.b", "tusk.ir.a"},
                     "tusk.ir.p.b": set()}
    assert find_cycle(graph) == ["tusk.ir.a", "tusk.ir.p", "tusk.ir.a"]


def test_tusk_ir_has_no_import_cycle():
    names = module_names()
    assert {"tusk.ir.module", "tusk.ir.serial", "tusk.ir.bir_json", "tusk.ir.bir_json.reader"} <= set(names)
    cycle = find_cycle(import_graph(names))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_function_of_the_bir_json_package_is_over_80_lines():
    long = []
    for path in sorted((IR / "bir_json").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > 80:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({n} lines)")
    assert long == []
