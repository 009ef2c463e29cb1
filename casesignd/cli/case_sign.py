"""``casesignd case sign`` and ``casesignd jobs download``: the asynchronous path in
one command, and the download of a ready job's artifact.

``case sign CONTRACT.pdf --case ID [--evidence FILE]...`` hashes and sniffs every file
(:mod:`casesignd.core.media`), asks the service which objects the case holds already
(``HEAD /v1/cases/{case_id}/objects/{sha256}``) and uploads only the others, builds
the ``sign_case`` manifest and submits it under an idempotency key derived from that
manifest. A run cut off anywhere, and run again with the same inputs, therefore sends
no object twice (an upload cut off midway is sent again whole: the service keeps no
part of it) and finds the job the first run made instead of making a second. With
``--wait`` it follows the job and writes the signed packet, its SHA-256 checked
against the job's, atomically to OUT.

Progress (large transfers, a job's states) goes to stderr, and only when stderr is a
terminal or with ``--progress``; stdout carries the result alone. A refusal is one
line on stderr naming the file or the option at fault.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from casesignd.cli.client import Client, ClientError
from casesignd.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    Command,
    UsageError,
    add_placement,
    atomic_output,
    default_signed_path,
    dump,
    err,
    out,
    parse_signer,
    placement_of,
    positive_float,
    wait_outcome_line,
)
from casesignd.core.errors import CasesignError
from casesignd.core.hashing import file_sha256, object_ref, sha256_hex

ClientFactory = Callable[[argparse.Namespace], Client]

# Smaller transfers end before a progress line would tell anyone anything.
PROGRESS_MIN_BYTES = 1 << 20
# Seconds between updates: a terminal line is rewritten in place; lines into a file
# or a pipe (--progress) stay few.
TTY_INTERVAL_S = 0.2
LINE_INTERVAL_S = 2.0
_CASE_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-")


@dataclass(frozen=True)
class InputFile:
    """One file of the packet, as hashed and sniffed here."""

    role: str  # "contract" or "evidence"
    path: Path
    sha256: str
    size: int
    media_type: str

    @property
    def name(self) -> str:
        return self.path.name

    def label(self) -> str:
        """How a line names the file: ``evidence photo.heic``."""
        return f"{self.role} {self.name}"


# --- pure parts -----------------------------------------------------------------------


def build_manifest(case_id: str, files: list[InputFile], signers: list[dict[str, str]],
                   policy: str | None) -> dict[str, Any]:
    """The ``sign_case`` request of the contract's shape: files in the order given,
    each named by its file name, referring to the case's object of its digest."""
    items = [{"role": f.role, "name": f.name, "media_type": f.media_type,
              "object_ref": object_ref(f.sha256), "sha256": f.sha256, "size": f.size}
             for f in files]
    manifest: dict[str, Any] = {"kind": "sign_case", "case_id": case_id, "items": items,
                                "signers": signers}
    if policy:
        manifest["policy_version"] = policy
    return manifest


def derived_key(manifest: dict[str, Any]) -> str:
    """An Idempotency-Key that is the same exactly when the manifest is: case, digests,
    names, types, signers and policy. A key over less would meet a changed request
    (a file renamed) and be refused ``idempotency_key_reused``; the service signs a
    packet of the same digests, signers and policy once whatever the key."""
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "case-sign:" + sha256_hex(canonical.encode())


def at_fault(field: str | None, files: list[InputFile], signers: list[dict[str, str]]) -> str | None:
    """What a refusal's ``field`` is on this command line: ``items[1].media_type`` →
    ``evidence photo.heic``, ``signers[0].id`` → ``--signer ID``, ``case_id`` → ``--case``."""
    if not field:
        return None
    head, _, _ = field.partition(".")
    for prefix, things in (("items[", files), ("signers[", signers)):
        if head.startswith(prefix) and head.endswith("]") and head[len(prefix):-1].isdigit():
            i = int(head[len(prefix):-1])
            if i >= len(things):
                return None
            thing = things[i]
            return thing.label() if isinstance(thing, InputFile) else f"--signer {thing['id']}"
    return {"case_id": "--case", "policy_version": "--policy", "signers": "--signer",
            "signature": "--field/--visible",
            "Idempotency-Key": "--idempotency-key"}.get(head)


def naming(e: ClientError, label: str | None) -> ClientError:
    """``e`` with ``label`` leading its message, so its one line names what is at fault."""
    if not label or e.status == 0:
        return e
    return ClientError(e.status, e.code, f"{label}: {e.message}", e.field, e.correlation_id,
                       e.retry_after_s)


def human_bytes(n: int) -> str:
    """``512 B``, ``1.5 KiB``, ``12.3 MiB``."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def progress_line(label: str, done: int, total: int) -> str:
    """``upload evidence scan.tiff:  42% 5.3 MiB of 12.6 MiB``."""
    pct = 100 if total <= 0 else min(100, done * 100 // total)
    return f"{label}: {pct:3d}% {human_bytes(done)} of {human_bytes(total)}"


def check_case_arg(case_id: str) -> str:
    """The --case value, or a usage error of the service's code for it."""
    if not 1 <= len(case_id) <= 128 or not set(case_id) <= _CASE_ID_CHARS:
        raise UsageError(f"invalid_case_id: --case: {case_id!r} is not 1-128 characters of "
                         "A-Z a-z 0-9 . _ : -")
    return case_id


# --- progress on stderr ---------------------------------------------------------------


class Progress:
    """What a person watching is told on ``stream`` (stderr): transfers of files of
    :data:`PROGRESS_MIN_BYTES` or more and a job's state changes. On a terminal one
    line is rewritten in place; elsewhere each update is a line of its own."""

    def __init__(self, stream: TextIO, *, enabled: bool, tty: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = tty
        self.clock = clock
        self._open = False  # a terminal line awaits its end
        self._state: str | None = None

    @classmethod
    def for_args(cls, args: argparse.Namespace) -> Progress:
        tty = sys.stderr.isatty()
        enabled = tty if args.progress is None else bool(args.progress)
        return cls(sys.stderr, enabled=enabled, tty=tty)

    def transfer(self, label: str, total: int) -> Callable[[int], None]:
        """A callback of the bytes moved so far, throttled; nothing for small files."""
        if not self.enabled or total < PROGRESS_MIN_BYTES:
            return lambda done: None
        interval = TTY_INTERVAL_S if self.tty else LINE_INTERVAL_S
        last = [float("-inf")]

        def tick(done: int) -> None:
            now = self.clock()
            if done < total and now - last[0] < interval:
                return
            last[0] = now
            self._show(progress_line(label, done, total), final=done >= total)

        return tick

    def note(self, text: str) -> None:
        if self.enabled:
            self._show(text, final=True)

    def job(self, job: dict[str, Any]) -> None:
        """A job as polled: a line when its state is not the one last seen."""
        state = job.get("state")
        if state != self._state:
            self._state = state
            self.note(f"job {job.get('job_id')} {state}")

    def close(self) -> None:
        """End a terminal line left open, so that an error line starts on its own."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False

    def _show(self, text: str, *, final: bool) -> None:
        if self.tty:
            # \r and "erase to end of line" (ECMA-48 EL): the line is rewritten in place.
            self.stream.write(f"\r{text}\x1b[K" + ("\n" if final else ""))
            self._open = not final
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


# --- the commands ---------------------------------------------------------------------


def read_inputs(contract: str, evidence: list[str]) -> list[InputFile]:
    """Hash and sniff every file: a usage error for one that cannot be read, a refusal
    (before anything is sent) for content the service can never accept."""
    from casesignd.core import media

    files = []
    for role, name in [("contract", contract), *(("evidence", e) for e in evidence)]:
        path = Path(name)
        if not path.is_file():
            raise UsageError(f"cannot read {role} {name}: no such file")
        try:
            sha256, size = file_sha256(path)
            sniffed = media.sniff_media_type(path)
        except OSError as e:
            raise UsageError(f"cannot read {role} {name}: {e.strerror}") from None
        f = InputFile(role, path, sha256, size, sniffed)
        if role == "contract" and sniffed != media.PDF:
            raise CasesignError(f"{f.label()}: not a PDF (its content is {sniffed})",
                                code="malformed_pdf")
        if sniffed in media.EXECUTABLE_TYPES:
            raise CasesignError(f"{f.label()}: an executable ({sniffed}) is never evidence",
                                code="active_content")
        files.append(f)
    return files


def upload_missing(client: Client, case_id: str, files: list[InputFile],
                   progress: Progress) -> None:
    """Upload each file the case does not hold yet, each digest once."""
    seen: set[str] = set()
    for f in files:
        if f.sha256 in seen:
            continue
        seen.add(f.sha256)
        try:
            if client.has_object(case_id, f.sha256) == f.size:
                progress.note(f"{f.label()}: already there")
                continue
            client.upload(f.path, case_id, digest=(f.sha256, f.size),
                          progress=progress.transfer(f"upload {f.label()}", f.size))
        except ClientError as e:
            # Only a refusal of the body is this file's; a token or a busy server is not.
            raise naming(e, f.label() if e.status in (413, 415, 422) else None) from None


def fetch_artifact(client: Client, job: dict[str, Any], dest: Path, progress: Progress) -> str:
    """Download a ready job's artifact into ``dest`` (atomically), its SHA-256 and size
    checked against the job's result; answers the SHA-256."""
    result = job.get("result") or {}
    url, want, size = result.get("download_url"), result.get("sha256"), result.get("size")
    job_id = job.get("job_id")
    if not isinstance(url, str) or not isinstance(want, str):
        raise ClientError(0, "bad_response", f"job {job_id} is ready without a download_url "
                          "and sha256")
    digest = hashlib.sha256()
    got = 0
    tick = progress.transfer(f"download {dest.name}", size if isinstance(size, int) else 0)
    with atomic_output(dest) as f:
        def sink(chunk: bytes) -> None:
            nonlocal got
            f.write(chunk)
            digest.update(chunk)
            got += len(chunk)
            tick(got)

        client.download(url, sink=sink)
        if digest.hexdigest() != want.lower() or (isinstance(size, int) and got != size):
            raise ClientError(0, "digest_mismatch", f"the artifact of job {job_id} is not "
                              "the one the job names (sha256, size); nothing written")
    return want.lower()


def case_sign(args: argparse.Namespace, make_client: ClientFactory) -> int:
    case_id = check_case_arg(args.case)
    if args.output and not args.wait:
        raise UsageError("-o is where --wait writes the signed packet: add --wait")
    files = read_inputs(args.contract, args.evidence)
    signers = args.signer
    client = make_client(args)
    progress = Progress.for_args(args)
    try:
        upload_missing(client, case_id, files, progress)
        manifest = build_manifest(case_id, files, signers, args.policy)
        if (signature := placement_of(args)) is not None:
            manifest["signature"] = signature
        try:
            job = client.submit(manifest, args.idempotency_key or derived_key(manifest))
        except ClientError as e:
            raise naming(e, at_fault(e.field, files, signers)) from None
        if not args.wait:
            dump(job)
            return EXIT_OK
        job_id = job.get("job_id")
        if not isinstance(job_id, str):
            raise ClientError(0, "bad_response", "the server answered a job without job_id")
        job = client.wait(job_id, args.timeout, on_poll=progress.job)
        if job.get("state") != "ready":
            progress.close()
            # A job's error names no item: only a lone contract is surely the one.
            err(wait_outcome_line(job, args.timeout, files[0].label() if len(files) == 1 else None))
            return EXIT_FAILED
        dest = Path(args.output) if args.output else default_signed_path(files[0].path)
        digest = fetch_artifact(client, job, dest, progress)
    finally:
        progress.close()
    out(f"job {job_id} sha256 {digest} wrote {dest}")
    return EXIT_OK


def jobs_download(args: argparse.Namespace, make_client: ClientFactory) -> int:
    client = make_client(args)
    job = client.get_job(args.job_id)
    state = job.get("state")
    job_id = str(job.get("job_id") or args.job_id)
    if state != "ready":
        raise CasesignError(f"job {job_id} is {state}", code="not_ready")
    # The server's job id (job_ plus hex) names the file, never the text typed.
    dest = Path(args.output) if args.output else Path(f"{job_id}.pdf")
    progress = Progress.for_args(args)
    try:
        digest = fetch_artifact(client, job, dest, progress)
    finally:
        progress.close()
    out(f"job {job_id} sha256 {digest} wrote {dest}")
    return EXIT_OK


# --- the parser -----------------------------------------------------------------------


def _progress_option(c: argparse.ArgumentParser) -> None:
    c.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress lines on stderr (default: when stderr is a terminal)")


def register_sign(case_sub: Any, command: Command, client: ClientFactory) -> None:
    """Adds ``case sign`` under the ``case`` group."""
    c = command("sign", lambda a: case_sign(a, client),
                "upload a contract and its evidence, submit them as one sign_case job; "
                "with --wait, write the signed packet", case_sub, client=True,
                epilog="Objects the case holds already are not sent again, and the job's "
                "Idempotency-Key is derived from the manifest: run it again after an "
                "interruption and it finds the same job. Exit 0 done, 1 refused or the job "
                "failed, 2 usage (a file that cannot be read), 3 server unreachable.")
    c.add_argument("contract", metavar="CONTRACT.pdf")
    c.add_argument("--case", required=True, metavar="ID", help="case ID")
    c.add_argument("--evidence", action="append", default=[], metavar="FILE",
                   help="an evidence file to embed; repeatable")
    c.add_argument("--signer", action="append", type=parse_signer, default=[],
                   metavar="ID:NAME:ROLE", help="a signer to record; repeatable")
    c.add_argument("--policy", metavar="V", help="policy version (default: the server's)")
    c.add_argument("--wait", action="store_true",
                   help="follow the job, then download the signed packet; exit 0 only when "
                   "it is written")
    c.add_argument("--timeout", type=positive_float, default=300.0, metavar="S",
                   help="with --wait, give up after S seconds (default 300)")
    c.add_argument("-o", "--output", metavar="OUT",
                   help="with --wait, where to write it (default CONTRACT.signed.pdf)")
    c.add_argument("--idempotency-key", metavar="K",
                   help="default: derived from the manifest")
    add_placement(c)
    _progress_option(c)


def register_download(jobs_sub: Any, command: Command, client: ClientFactory) -> None:
    """Adds ``jobs download`` under the ``jobs`` group."""
    c = command("download", lambda a: jobs_download(a, client),
                "download a ready job's artifact, its SHA-256 checked", jobs_sub, client=True,
                epilog="Exit 1 (not_ready) for a job that is not ready.")
    c.add_argument("job_id", metavar="ID")
    c.add_argument("-o", "--output", metavar="OUT", help="where to write it (default ID.pdf)")
    _progress_option(c)
