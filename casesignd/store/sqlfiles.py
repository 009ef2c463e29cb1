"""The SQL the stores keep as data: named statements ("-- name: NAME" blocks of a
.sql file) and numbered migrations (NNNN_name.sql), read from the package."""

from __future__ import annotations

from importlib import resources


def load_statements(path: str = "sql/queries.sql") -> dict[str, str]:
    """The named statements of a .sql file in the package ("-- name: NAME" blocks)."""
    text = resources.files("casesignd.store").joinpath(path).read_text("utf-8")
    out: dict[str, str] = {}
    name = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("-- name: "):
            if name:
                out[name] = "\n".join(lines).strip()
            name, lines = line.removeprefix("-- name: ").strip(), []
        elif name and not line.startswith("--"):
            lines.append(line)
    if name:
        out[name] = "\n".join(lines).strip()
    return out


def migrations(directory: str = "sql") -> list[tuple[int, str]]:
    """The numbered migrations (NNNN_name.sql) of a package directory, in order."""
    files = resources.files("casesignd.store").joinpath(directory)
    found = []
    for entry in files.iterdir():
        stem = entry.name.split("_", 1)[0]
        if entry.name.endswith(".sql") and stem.isdigit():
            found.append((int(stem), entry.read_text("utf-8")))
    return sorted(found)
