"""What every ``casesignd`` command module shares: its output, its exit codes, the
usage error, how a module adds its commands to the parser (:data:`Command`), and what
the client commands that write a signed document share (signers, output files, a
failed job's line)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from casesignd.cli.client import refusal_text

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


def _positive(text: str, parse: Callable[[str], Any], what: str) -> Any:
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """Seconds, above zero (an argparse type)."""
    return float(_positive(text, float, "seconds"))


def positive_int(text: str) -> int:
    """A whole number above zero (an argparse type)."""
    return int(_positive(text, int, "a whole number"))


def parse_signer(text: str) -> dict[str, str]:
    """``ID:NAME:ROLE`` → a signer; the name may itself contain colons."""
    sid, sep1, rest = text.partition(":")
    name, sep2, role = rest.rpartition(":")
    if not (sep1 and sep2 and sid and name and role):
        raise argparse.ArgumentTypeError(f"expected ID:NAME:ROLE, got {text!r}")
    return {"id": sid, "name": name, "role": role}


def parse_visible(text: str) -> dict[str, Any]:
    """``PAGE:X1,Y1,X2,Y2`` → the request's ``{"page", "box"}`` (points; PAGE may be
    negative, counting from the end)."""
    page, sep, box = text.partition(":")
    try:
        numbers = [float(v) for v in box.split(",")]
        if not sep or len(numbers) != 4:
            raise ValueError
        return {"page": int(page), "box": numbers}
    except ValueError:
        hint = "" if sep else " (a bare --visible goes after the file)"
        raise argparse.ArgumentTypeError(
            f"expected PAGE:X1,Y1,X2,Y2, got {text!r}{hint}") from None


# A bare --visible: seen, where the policy puts it (its page and box, or its field).
POLICY_VISIBLE = {"visible": True}


def add_placement(c: Any) -> None:
    """``--field NAME`` / ``--visible [PAGE:X1,Y1,X2,Y2]``: where the signature goes."""
    where = c.add_mutually_exclusive_group()
    where.add_argument("--field", metavar="NAME",
                       help="sign into the document's own empty signature field NAME")
    where.add_argument("--visible", type=parse_visible, nargs="?", const=POLICY_VISIBLE,
                       metavar="PAGE:X1,Y1,X2,Y2",
                       help="a visible stamp: alone, where the policy puts it (its page and "
                       "box, or its field); with PAGE:X1,Y1,X2,Y2, on PAGE (-1: the last) in "
                       "this box, in points. The policy must be visible")


def placement_of(args: Any) -> dict[str, Any] | None:
    """The request's ``signature`` object from :func:`add_placement`'s options."""
    if getattr(args, "field", None):
        return {"field": args.field}
    visible = getattr(args, "visible", None)
    return dict(visible) if visible is not None else None


def default_signed_path(path: Path) -> Path:
    """``contract.pdf`` → ``contract.signed.pdf`` (same directory)."""
    stem = path.stem if path.suffix.lower() == ".pdf" else path.name
    return path.with_name(f"{stem}.signed.pdf")


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[BinaryIO]:
    """A file to write that replaces ``path`` only once it is whole and on disk, so
    readers see the old file or the whole new one; an exception leaves no trace."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    with atomic_output(path) as f:
        f.write(data)


def wait_outcome_line(job: dict[str, Any], timeout_s: float, about: str | None = None) -> str:
    """The line for a waited-on job that did not end ready: failed, canceled, or still
    on its way when the wait gave up. ``about`` names what failed, when it is known."""
    state = job.get("state")
    if state in ("failed", "canceled"):
        return job_failure_line(job, about)
    return f"error: timed_out: job {job.get('job_id')} still {state} after {timeout_s:g} s"


def job_failure_line(job: dict[str, Any], about: str | None = None) -> str:
    """``error: CODE: [ABOUT: ]job ID failed (category ..., correlation id ...)``, or
    canceled."""
    err = job.get("error") or {}
    if job.get("state") == "canceled":
        return f"error: canceled: job {job.get('job_id')} was canceled"
    extras = [f"category {err['category']}"] if err.get("category") else []
    if isinstance(err.get("reason"), str):
        extras.append(refusal_text(err["reason"], err.get("where")))
    if err.get("correlation_id"):
        extras.append(f"correlation id {err['correlation_id']}")
    tail = f" ({', '.join(extras)})" if extras else ""
    code = err.get("code") or "failed"
    lead = f"{about}: " if about else ""
    said = f": {err['message']}" if isinstance(err.get("message"), str) else ""
    return f"error: {code}: {lead}job {job.get('job_id')} failed{said}{tail}"
