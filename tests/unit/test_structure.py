"""The package's shape: no import cycles between its modules, lazy imports included
(an import inside a function is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "casesignd"


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports anywhere in its body (pure over the AST)."""
    me = "casesignd." + path.stem
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = "casesignd" if node.level else ""
            target = f"{base}.{node.module}" if node.module and base else (node.module or base)
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


def test_the_package_has_no_import_cycles() -> None:
    files = [p for p in PKG.glob("*.py") if p.name != "__init__.py"]
    modules = {"casesignd." + p.stem for p in files}
    graph = {"casesignd." + p.stem: imports_of(p, modules) for p in files}
    assert cycles(graph) == []
