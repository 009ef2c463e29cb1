"""The package's shape: no import cycles between its modules, lazy imports included
(an import inside a function is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "casesignd"


def module_name(path: Path) -> str:
    """``casesignd.x`` for casesignd/x.py, ``casesignd.store`` for its __init__.py."""
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of_file(path: Path) -> str:
    """The package a relative import in ``path`` starts from."""
    me = module_name(path)
    return me if path.name == "__init__.py" else me.rpartition(".")[0]


def import_target(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, relative imports resolved against
    ``package`` (pure)."""
    if not node.level:
        return node.module or ""
    base = package
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{node.module}" if node.module else base


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports anywhere in its body (pure over the AST)."""
    me = module_name(path)
    package = package_of_file(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            target = import_target(node, package)
            names = [target, *(f"{target}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n in modules and n != me)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of ``graph``, each once (pure)."""
    out: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cyc = path[path.index(nxt):] + [nxt]
                if frozenset(cyc) not in seen:
                    seen.add(frozenset(cyc))
                    out.append(cyc)
            elif len(path) < 16:
                walk(nxt, [*path, nxt])

    for node in sorted(graph):
        walk(node, [node])
    return out


def test_cycles_finds_what_it_should() -> None:
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def package_graph() -> dict[str, set[str]]:
    files = [p for p in PKG.rglob("*.py") if p != PKG / "__init__.py"]
    modules = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, modules) for p in files}


def test_imports_are_resolved_in_subpackages_too() -> None:
    graph = package_graph()
    assert "casesignd.store.records" in graph["casesignd.store.sqlite"]
    assert "casesignd.core.errors" in graph["casesignd.store.records"]
    assert "casesignd.store" in graph["casesignd.engine.pool"]


def test_the_package_has_no_import_cycles() -> None:
    # A package's __init__ counts as a module: `from casesignd.cli import case` leans on
    # casesignd/cli/__init__.py, which must not lean back on the module importing it.
    assert cycles(package_graph()) == []


def test_no_module_is_over_the_size_it_earns() -> None:
    # A module over 600 lines says why at its top ("Its size:" in its docstring).
    long = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
            if len(p.read_text().splitlines()) > 600 and "Its size:" not in (ast.get_docstring(
                ast.parse(p.read_text())) or "")]
    assert long == []
