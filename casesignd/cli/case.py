"""The client's commands on a case as a whole: ``case hold``, ``case release`` and
``case erase`` (``POST`` / ``DELETE /v1/cases/{case_id}/hold``, ``DELETE
/v1/cases/{case_id}``), and ``case sign`` (:mod:`casesignd.cli.case_sign`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import casesignd.cli.case_sign as cli_casesign
from casesignd.cli.client import Client
from casesignd.cli.common import EXIT_OK, Command, UsageError, dump


def register(sub: Any, command: Command, client: Callable[[argparse.Namespace], Client]) -> None:
    """Adds ``case hold / release / erase / sign``."""

    def hold(args: argparse.Namespace) -> int:
        dump(client(args).hold(args.case_id, placed=True))
        return EXIT_OK

    def release(args: argparse.Namespace) -> int:
        dump(client(args).hold(args.case_id, placed=False))
        return EXIT_OK

    def erase(args: argparse.Namespace) -> int:
        if not args.yes:
            raise UsageError("erasure cannot be undone: add --yes")
        dump(client(args).erase(args.case_id))
        return EXIT_OK

    case = sub.add_parser("case", help="a case as a whole", description="a case as a whole")
    case_sub = case.add_subparsers(dest="case_command", metavar="ACTION", required=True)
    for name, fn, text in (
        ("hold", hold, "place a legal hold: nothing of the case is removed while it holds"),
        ("release", release, "lift the case's legal hold"),
        ("erase", erase, "erase the case's objects and artifacts now (refused under a hold)"),
    ):
        c = command(name, fn, text, case_sub, client=True)
        c.add_argument("case_id", metavar="ID")
        if name == "erase":
            c.add_argument("--yes", action="store_true", help="yes, erase it")
    cli_casesign.register_sign(case_sub, command, client)
