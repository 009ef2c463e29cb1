"""The package tree of ``casesignd/`` as markdown, one line per module saying what it
promises, taken from the package and module docstrings.

    scripts/layout_tree.py                      # print it
    scripts/layout_tree.py --write docs/design.md   # replace the tree between its markers

The tree in ``docs/design.md`` sits between ``<!-- layout:start -->`` and
``<!-- layout:end -->``; ``tests/unit/test_docs.py`` fails when a module is missing
from it or it names one that is gone.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "casesignd"
START, END = "<!-- layout:start -->", "<!-- layout:end -->"

# Folders of data rather than code, said in words since they hold no docstring.
DATA_DIRS = {
    "store/sql": "the schema, numbered migrations and named statements of SQLite",
    "store/sql/postgres": "the same for PostgreSQL",
    "http/static": "the console's page, styles and JavaScript modules, shipped as package data",
    "text/fonts": "DejaVu Sans and Droid Sans Fallback, embedded in invoices and stamps",
}


def plain(text: str) -> str:
    """A docstring's reStructuredText roles and literals as markdown code spans."""
    text = re.sub(r":[a-z]+:`~?\.?([^`]+)`", lambda m: f"`{m.group(1).split('.')[-1]}`"
                  if m.group(0).startswith(":class:") or m.group(0).startswith(":func:")
                  or m.group(0).startswith(":data:") else f"`{m.group(1)}`", text)
    return text.replace("``", "`")


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    match = re.match(r"(.+?\.)(?:\s+(?=[A-Z`(])|$)", para)
    sentence = match.group(1) if match else para
    return plain(sentence if sentence.endswith(".") else sentence + ".")


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def modules(package: Path) -> list[Path]:
    """The package's modules (``__init__`` aside), by name."""
    return sorted(p for p in package.glob("*.py") if p.name != "__init__.py")


def tree() -> str:
    """The whole tree, as markdown."""
    out = ["### `casesignd/`", "", first_sentence(docstring(PACKAGE / "__init__.py")), ""]
    out += ["| module | what it promises |", "|---|---|"]
    out += [f"| `{p.name}` | {first_sentence(docstring(p))} |" for p in modules(PACKAGE)]
    for package in sorted(d for d in PACKAGE.iterdir() if (d / "__init__.py").exists()):
        rel = package.relative_to(PACKAGE).as_posix()
        out += ["", f"### `{rel}/`", "", plain(" ".join(
            docstring(package / "__init__.py").split("\n\n")[0].split())), ""]
        out += ["| module | what it promises |", "|---|---|"]
        out += [f"| `{p.name}` | {first_sentence(docstring(p))} |" for p in modules(package)]
        for data, words in DATA_DIRS.items():
            if data.startswith(rel + "/") and (PACKAGE / data).is_dir():
                out.append(f"| `{data[len(rel) + 1:]}/` | {words[0].upper() + words[1:]}. |")
    return "\n".join(out) + "\n"


def listed_modules(markdown: str) -> set[str]:
    """The module paths (``store/sqlite.py``) a written tree names."""
    found, package = set(), ""
    for line in markdown.splitlines():
        head = re.match(r"### `([a-z_/]+)/`", line)
        if head:
            package = "" if head.group(1) == "casesignd" else head.group(1) + "/"
        row = re.match(r"\| `([a-z_0-9]+\.py)` \|", line)
        if row:
            found.add(package + row.group(1))
    return found


def existing_modules() -> set[str]:
    """The module paths the package has now."""
    return {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def between_markers(text: str) -> str:
    return text[text.index(START) + len(START):text.index(END)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, metavar="MD",
                        help="replace the tree between the markers of this file")
    args = parser.parse_args()
    if args.write is None:
        sys.stdout.write(tree())
        return 0
    text = args.write.read_text()
    start, end = text.index(START) + len(START), text.index(END)
    args.write.write_text(text[:start] + "\n" + tree() + "\n" + text[end:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
