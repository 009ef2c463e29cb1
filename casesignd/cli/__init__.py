"""The ``casesignd`` command line: one module per command group.

The entry point ``casesignd.cli:main`` is public (``pyproject.toml`` names it). It is found
lazily, so importing one command's module does not load them all.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "main":
        from casesignd.cli.commands import main

        return main
    raise AttributeError(name)
