"""Which way imports go between casesignd's packages: a package imports only the
packages its row of :data:`ARROWS` names, no module reaches into another package's
underscore names, only ``daemon/``, ``ops/`` and ``cli/`` read the config file, and
no job kind imports another.

An import inside a function or under ``TYPE_CHECKING`` counts: it is a dependency
all the same. ``casesignd/__init__.py`` (the version) and ``__main__.py`` (the
command) stand outside the table. Each rule is first shown failing on a small wrong
example, so that it is known to bite.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.unit.test_structure import (
    PKG,
    import_target,
    module_name,
    package_graph,
    package_of_file,
)

# What each package may import besides itself, lowest layers first. A package's row
# is the whole of what it may lean on; one not named here is a wrong arrow.
ARROWS: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    # The vocabulary everything shares: the standard library and libraries only.
    "core": (),
    "config": ("core",),
    "observability": ("core",),
    # Text as drawn (fonts, shaping, bidi), shared by the invoices and the stamp.
    "text": ("core",),
    "pdf": ("core",),
    "verify": ("core",),
    # Settings come in as values, not as config objects.
    "signing": ("pdf", "text", "core"),
    "files": ("config", "core"),
    "store": ("config", "core"),
    # Branding keeps logo bytes with the artifacts' write-once file primitive.
    "invoices": ("text", "files", "config", "core"),
    "engine": ("store", "files", "observability", "config", "core"),
    # The sender posts a job as GET /v1/jobs/{id} answers it (engine.jobs.resource).
    "webhooks": ("engine", "store", "observability", "config", "core"),
    "job_kinds": ("engine", "signing", "invoices", "text", "pdf", "files", "store", "config",
                  "core"),
    # Handlers are written against a protocol of the services (http.services), never
    # the daemon that builds them.
    # The kiosk drives the one signing ladder itself, within its deadline.
    "http": ("job_kinds", "engine", "store", "files", "signing", "verify", "pdf",
             "observability", "config", "core"),
    # The front doors: the daemon wires everything; ops and the CLI work on a state
    # directory and a store without a daemon.
    "daemon": ("http", "webhooks", "job_kinds", "engine", "invoices", "store", "files", "signing",
               "verify", "pdf", "text", "observability", "config", "core"),
    "ops": ("store", "files", "config", "core"),
    # `casesignd check` builds a policy's limits as the job kinds do (job_kinds.signing).
    "cli": ("daemon", "ops", "job_kinds", "verify", "signing", "pdf", "store", "config",
            "core"),
}.items()}

# Wrong arrows tolerated while a change that removes them is under way, each named as
# ("package.module", "package.module"); once the edge is gone the test asks for its
# line to go. None today.
PENDING: frozenset[tuple[str, str]] = frozenset()

# Job kinds are plug-ins of the engine: none imports another. A scheduler that admits
# a kind's jobs (renewal) goes through the kinds the engine holds, by name.
PLUG_INS = "job_kinds"
# What the kinds share and is no kind itself: a job attempt as the signing ladder's
# steps, and a policy's settings as the values signing code takes.
SHARED_BY_PLUG_INS = frozenset({"casesignd.job_kinds.signing"})

# Where the config file may be read from, and what reads it.
CONFIG_READERS_MAY = frozenset({"daemon", "ops", "cli", "config"})
CONFIG_READERS = frozenset({("casesignd.config", "load"), ("casesignd.config", "loads")})


def package_of(module: str) -> str | None:
    """``casesignd.store.outbox`` -> ``store``, ``casesignd.config`` -> ``config``; None
    for the top-level ``casesignd`` and its ``__main__``."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "casesignd" or parts[1] == "__main__":
        return None
    return parts[1]


def wrong_arrows(graph: dict[str, set[str]], arrows: dict[str, frozenset[str]],
                 pending: frozenset[tuple[str, str]] = frozenset()) -> list[str]:
    """Every import of ``graph`` that its package's row of ``arrows`` does not allow
    and ``pending`` does not name, and every ``pending`` edge no longer there (pure)."""
    out: list[str] = []
    for module, deps in sorted(graph.items()):
        src = package_of(module)
        if src is None:
            continue
        if src not in arrows:
            out.append(f"{module}: package {src} has no row in ARROWS")
            continue
        for dep in sorted(deps):
            dst = package_of(dep)
            if dst is None or dst == src or dst in arrows[src] or (module, dep) in pending:
                continue
            out.append(f"{module} -> {dep}")
    out += [f"{a} -> {b} is gone: delete it from PENDING"
            for a, b in sorted(pending) if b not in graph.get(a, set())]
    return out


def plug_ins_importing_each_other(graph: dict[str, set[str]], package: str,
                                  shared: frozenset[str] = frozenset()) -> list[str]:
    """Every import between two modules of ``package`` (its __init__ and the modules
    in ``shared`` aside) (pure)."""
    init = f"casesignd.{package}"
    return [f"{module} -> {dep}" for module, deps in sorted(graph.items())
            if package_of(module) == package and module != init
            for dep in sorted(deps)
            if package_of(dep) == package and dep != init and dep not in shared]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def references(tree: ast.AST, package: str, modules: set[str]) -> Iterator[tuple[str, str]]:
    """``(owner, name)`` for every name this module takes from a casesignd module:
    each step of an import (``casesignd.x`` then ``y`` for ``from casesignd.x import
    y``), and ``name`` read off an imported module (``mod.name``) (pure)."""
    bound: dict[str, str] = {}  # a local name -> the casesignd module it is
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = import_target(node, package)
            if target.split(".")[0] != "casesignd":
                continue
            yield from _steps(target)
            for a in node.names:
                yield target, a.name
                if f"{target}.{a.name}" in modules:
                    bound[a.asname or a.name] = f"{target}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "casesignd":
                    continue
                yield from _steps(a.name)
                if a.asname:
                    bound[a.asname] = a.name
                else:  # import casesignd.x.y binds casesignd
                    bound["casesignd"] = "casesignd"

    def dotted(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return bound.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = dotted(expr.value)
            return f"{base}.{expr.attr}" if base else None
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = dotted(node.value)
            if owner is not None and (owner in modules or owner == "casesignd"):
                yield owner, node.attr


def _steps(module: str) -> Iterator[tuple[str, str]]:
    parts = module.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i]), parts[i]


def private_reaches(module: str, refs: Iterator[tuple[str, str]]) -> list[str]:
    """The underscore names ``module`` takes from another package (pure)."""
    mine = package_of(module)
    return sorted({f"{module} uses {owner}.{name}" for owner, name in refs
                   if _private(name) and package_of(owner) not in (None, mine)})


def config_reads(module: str, refs: Iterator[tuple[str, str]]) -> list[str]:
    """How ``module`` reads the config file, if its package may not (pure)."""
    if package_of(module) in CONFIG_READERS_MAY:
        return []
    return sorted({f"{module} uses {owner}.{name}" for owner, name in refs
                   if (owner, name) in CONFIG_READERS})


def _sources() -> Iterator[tuple[str, ast.AST, str]]:
    for path in sorted(PKG.rglob("*.py")):
        if path != PKG / "__init__.py":
            yield module_name(path), ast.parse(path.read_text()), package_of_file(path)


def _modules() -> set[str]:
    return {module_name(p) for p in PKG.rglob("*.py")}


# --- the checks bite --------------------------------------------------------------------


def test_a_wrong_arrow_is_found() -> None:
    arrows = {"core": frozenset(), "store": frozenset({"core"}), "http": frozenset({"store"})}
    graph = {"casesignd.store.sqlite": {"casesignd.core.errors", "casesignd.http.common",
                                        "casesignd.store.records"},
             "casesignd.http.common": {"casesignd.store"},
             "casesignd.core.errors": set()}
    assert wrong_arrows(graph, arrows) == ["casesignd.store.sqlite -> casesignd.http.common"]
    pending = frozenset({("casesignd.store.sqlite", "casesignd.http.common")})
    assert wrong_arrows(graph, arrows, pending) == []
    # A pending edge that is gone must leave the list; a package must have a row.
    fixed = {**graph, "casesignd.store.sqlite": {"casesignd.core.errors"}}
    assert wrong_arrows(fixed, arrows, pending) == [
        "casesignd.store.sqlite -> casesignd.http.common is gone: delete it from PENDING"]
    assert wrong_arrows({"casesignd.newpkg.x": set()}, arrows) == [
        "casesignd.newpkg.x: package newpkg has no row in ARROWS"]


def test_a_job_kind_importing_another_is_found() -> None:
    graph = {"casesignd.job_kinds.renewal": {"casesignd.job_kinds.extend_signature",
                                             "casesignd.engine.kinds"},
             "casesignd.job_kinds": {"casesignd.job_kinds.renewal"},
             "casesignd.engine.pool": {"casesignd.engine.kinds"}}
    assert plug_ins_importing_each_other(graph, "job_kinds") == [
        "casesignd.job_kinds.renewal -> casesignd.job_kinds.extend_signature"]


PRIVATE_EXAMPLE = '''
from casesignd.store.records import _row, Job
from casesignd.store import sqlite
from casesignd.engine import pool as worker
import casesignd.store.memory
from casesignd.http import _own


def f():
    from casesignd.files._inner import thing
    sqlite._connect()
    casesignd.store.memory._MemoryTx
    worker._private_helper()
    sqlite.__name__
    _own._fine
'''


def test_a_reach_into_private_names_is_found() -> None:
    modules = {"casesignd.store", "casesignd.store.records", "casesignd.store.sqlite",
               "casesignd.store.memory", "casesignd.engine.pool", "casesignd.http._own",
               "casesignd.files._inner"}
    refs = references(ast.parse(PRIVATE_EXAMPLE), "casesignd.http", modules)
    assert private_reaches("casesignd.http.api", refs) == [
        "casesignd.http.api uses casesignd.engine.pool._private_helper",
        "casesignd.http.api uses casesignd.files._inner",
        "casesignd.http.api uses casesignd.store.memory._MemoryTx",
        "casesignd.http.api uses casesignd.store.records._row",
        "casesignd.http.api uses casesignd.store.sqlite._connect",
    ]
    # The same names from inside their own package are its own business.
    refs = references(ast.parse(PRIVATE_EXAMPLE), "casesignd.store", modules)
    assert private_reaches("casesignd.store.verbs", refs) == [
        "casesignd.store.verbs uses casesignd.engine.pool._private_helper",
        "casesignd.store.verbs uses casesignd.files._inner",
        "casesignd.store.verbs uses casesignd.http._own",
        "casesignd.store.verbs uses casesignd.http._own._fine",
    ]


CONFIG_EXAMPLE = '''
from casesignd import config
from casesignd.config import Config, loads as decode


def reread(path):
    return config.load(path), decode("")
'''


def test_a_read_of_the_config_file_is_found() -> None:
    modules = {"casesignd.config"}
    refs = list(references(ast.parse(CONFIG_EXAMPLE), "casesignd.signing", modules))
    assert config_reads("casesignd.signing.keys", iter(refs)) == [
        "casesignd.signing.keys uses casesignd.config.load",
        "casesignd.signing.keys uses casesignd.config.loads",
    ]
    assert config_reads("casesignd.daemon.server", iter(refs)) == []
    # Its types are no read of the file.
    refs = references(ast.parse("from casesignd.config import Config, Policy"),
                      "casesignd.signing", modules)
    assert config_reads("casesignd.signing.keys", refs) == []


# --- the package holds them -------------------------------------------------------------


def test_every_package_has_a_row_and_nothing_more() -> None:
    packages = {package_of(m) for m in _modules()} - {None}
    assert packages == set(ARROWS)
    assert all(row <= set(ARROWS) for row in ARROWS.values())


def test_imports_go_the_way_the_arrows_point() -> None:
    assert wrong_arrows(package_graph(), ARROWS, PENDING) == []


def test_no_job_kind_imports_another() -> None:
    assert plug_ins_importing_each_other(package_graph(), PLUG_INS, SHARED_BY_PLUG_INS) == []


def test_no_module_reaches_into_another_packages_underscore_names() -> None:
    modules = _modules()
    found = [line for module, tree, package in _sources()
             for line in private_reaches(module, references(tree, package, modules))]
    assert found == []


def test_only_the_daemon_ops_and_the_cli_read_the_config_file() -> None:
    modules = _modules()
    found = [line for module, tree, package in _sources()
             for line in config_reads(module, references(tree, package, modules))]
    assert found == []


def test_the_readers_named_are_the_ones_that_read() -> None:
    # config.load reads the file, config.loads decodes its text: if either is renamed,
    # the rule above would hold vacuously.
    tree = ast.parse((PKG / "config.py").read_text())
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {name for _, name in CONFIG_READERS} <= defined


def test_the_design_document_draws_these_arrows() -> None:
    # docs/design.md shows the table to people; it must be this table.
    text = (PKG.parent / "docs" / "design.md").read_text()
    block = text.split("## Which way imports go", 1)[1].split("```")[1]
    drawn = {}
    for line in block.strip().splitlines():
        package, _, deps = line.partition("→")
        drawn[package.strip()] = frozenset() if deps.strip().startswith("(") else frozenset(
            d.strip() for d in deps.split(","))
    assert drawn == ARROWS
