"""The benchmark scripts' shape: a script under scripts/ imports no other script, only
the helpers they share (scripts/benchlib), and their imports have no cycle. One
benchmark that hands over to another runs it as a program (benchlib.run_script)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_structure import cycles

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
HELPERS = "benchlib"


def script_modules() -> dict[str, Path]:
    """Each Python file under scripts/ by the name it is imported as (scripts/ is on
    the path of a script run from there): ``bench_sign``, ``benchlib.e2e``."""
    found = {p.stem: p for p in SCRIPTS.glob("*.py")}
    for p in (SCRIPTS / HELPERS).glob("*.py"):
        found[HELPERS if p.stem == "__init__" else f"{HELPERS}.{p.stem}"] = p
    return found


def imports_among(source: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``source`` imports anywhere in its body, as
    ``x`` or as ``scripts.x`` (pure over the AST)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n.removeprefix("scripts.") for n in names)
    return found & modules


def script_graph() -> dict[str, set[str]]:
    modules = script_modules()
    return {name: imports_among(path.read_text(), set(modules)) - {name}
            for name, path in modules.items()}


def not_helpers(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module that is not one of the shared helpers (pure)."""
    return [f"{name} -> {dep}" for name, deps in sorted(graph.items()) for dep in sorted(deps)
            if dep != HELPERS and not dep.startswith(f"{HELPERS}.")]


def test_the_checks_find_what_they_should() -> None:
    source = "import bench_sign\nfrom scripts.e2e import run\nfrom benchlib import loadavg\n"
    modules = {"bench_sign", "e2e", "benchlib", "benchlib.loadavg", "bench_kiosk"}
    graph = {"bench_kiosk": imports_among(source, modules), "bench_sign": {"bench_kiosk"}}
    assert graph["bench_kiosk"] == {"bench_sign", "e2e", "benchlib", "benchlib.loadavg"}
    assert not_helpers(graph) == ["bench_kiosk -> bench_sign", "bench_kiosk -> e2e",
                                  "bench_sign -> bench_kiosk"]
    assert cycles(graph) == [["bench_kiosk", "bench_sign", "bench_kiosk"]]


def test_the_scripts_are_all_seen() -> None:
    graph = script_graph()
    assert {"bench_sign", "bench_kiosk", "soak_day", "benchlib", "benchlib.e2e"} <= set(graph)
    assert "benchlib.kiosk" in graph["benchlib.e2e"]


def test_a_script_imports_no_other_script() -> None:
    assert not_helpers(script_graph()) == []


def test_the_scripts_imports_have_no_cycle() -> None:
    assert cycles(script_graph()) == []
