"""What every ``casesignd`` command module shares: its output, its exit codes, the
usage error, and how a module adds its commands to the parser (:data:`Command`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

CONFIG_HELP = "config file (default $CASESIGND_CONFIG or casesignd-state/config.toml)"

# ``command(name, fn, help, parent=..., client=False, epilog=None)``: adds a command
# under ``parent`` (the top level by default) and answers its parser.
Command = Callable[..., argparse.ArgumentParser]


class UsageError(Exception):
    """A problem with what the user typed or pointed at; exit code 2."""


def out(text: str) -> None:
    print(text, file=sys.stdout, flush=True)


def err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def dump(obj: Any) -> None:
    out(json.dumps(obj, indent=2, sort_keys=False))
