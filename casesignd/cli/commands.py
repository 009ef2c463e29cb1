"""The ``casesignd`` command line.

Exit codes: 0 done; 1 refused or failed (a server error, a job that did not end
ready, a broken audit chain, a signature that does not pass or a PDF without one, an
existing setup); 2 a usage or configuration error (bad arguments, an unreadable input
file or, for verify, one that is not a PDF, missing token, bad config); 3 the server
could not be reached. Expected errors print one line on stderr and never a traceback.

Heavy modules (the daemon, cryptography, the PDF verifier) are imported inside
the commands that need them, so ``casesignd --help`` and the client commands start
fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import casesignd.cli.admin as cli_admin
import casesignd.cli.backup as cli_backup
import casesignd.cli.case as cli_case
import casesignd.cli.case_sign as cli_casesign
import casesignd.cli.check as cli_check
import casesignd.cli.store as cli_store
from casesignd.cli.client import (
    Client,
    ClientError,
    ServerUnreachable,
    config_path_from,
    load_settings,
    refusal_text,
)
from casesignd.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    UsageError,
    add_placement,
    default_signed_path,
    parse_signer,
    placement_of,
    wait_outcome_line,
    write_atomic,
)
from casesignd.cli.common import dump as _dump
from casesignd.cli.common import err as _err
from casesignd.cli.common import out as _out
from casesignd.cli.common import positive_float as _positive_float
from casesignd.cli.common import positive_int as _positive_int
from casesignd.core.errors import CasesignError, ConfigError
from casesignd.core.hashing import file_sha256, sha256_hex

DEFAULT_INIT_DIR = "casesignd-state"


# --- helpers --------------------------------------------------------------------------


def _read_input(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None


def _need_file(path: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"cannot read {path}: no such file")
    return p


def _client(args: argparse.Namespace) -> Client:
    settings = load_settings(getattr(args, "config", None))
    if not settings.token:
        raise UsageError(
            "no token: set CASESIGND_TOKEN, or point --config at a setup made by "
            "`casesignd init` (its client.env)"
        )
    try:
        return Client(settings.url, settings.token, timeout_s=args.http_timeout)
    except ClientError as e:  # a malformed CASESIGND_URL
        raise UsageError(f"{settings.url_from}: {e.message}") from None


# --- commands -------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    from casesignd.ops.init import init_dir

    result = init_dir(Path(args.dir), listen=args.listen, key_type=args.key_type)
    _out(f"wrote a local setup in {result.dir}/")
    for path in result.created:
        _out(f"  {path.name}")
    _out("next:")
    _out(f"  casesignd serve --config {result.config_path}")
    _out(f"  set -a; . {result.client_env_path}; set +a   # CASESIGND_URL, CASESIGND_TOKEN")
    _out(f"  casesignd verify FILE.signed.pdf --trust {result.ca_cert_path}")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from casesignd.daemon import server  # the daemon: aiohttp and friends load only here
    except ImportError as e:
        raise CasesignError(f"the daemon cannot start: {e}", code="unavailable") from None

    config = str(config_path_from(args.config, os.environ))
    return int(server.serve(config, args.listen, args.node))


def cmd_sign(args: argparse.Namespace) -> int:
    path = _need_file(args.file)
    manifest: dict[str, Any] = {"case_id": args.case, "signers": args.signer or []}
    if args.policy:
        manifest["policy_version"] = args.policy
    if (signature := placement_of(args)) is not None:
        manifest["signature"] = signature
    try:
        manifest["sha256"] = file_sha256(path)[0]
    except OSError as e:
        raise UsageError(f"cannot read {args.file}: {e.strerror}") from None
    out = Path(args.output) if args.output else default_signed_path(path)
    data, headers = _client(args).sign(path, manifest, args.idempotency_key)
    write_atomic(out, data)
    job_id = headers.get("X-Job-Id", "-")
    digest = headers.get("X-Artifact-SHA256") or sha256_hex(data)
    _out(f"job {job_id} sha256 {digest} wrote {out}")
    return EXIT_OK


def cmd_upload(args: argparse.Namespace) -> int:
    _need_file(args.file)
    _dump(_client(args).upload(args.file, args.case))
    return EXIT_OK


def cmd_submit(args: argparse.Namespace) -> int:
    raw = _read_input(args.manifest)
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise UsageError(f"{args.manifest}: not valid JSON: {e}") from None
    if not isinstance(manifest, dict):
        raise UsageError(f"{args.manifest}: expected a JSON object")
    client = _client(args)
    job = client.submit(manifest, args.idempotency_key)
    if not args.wait:
        _dump(job)
        return EXIT_OK
    if not job.get("job_id"):
        raise ClientError(0, "bad_response", "the server answered a job without job_id")
    job = client.wait(job["job_id"], args.timeout)
    _dump(job)
    if job.get("state") == "ready":
        return EXIT_OK
    _err(wait_outcome_line(job, args.timeout))
    return EXIT_FAILED


def cmd_jobs_list(args: argparse.Namespace) -> int:
    page = _client(args).list_jobs(args.state, args.limit, args.cursor)
    if args.json:
        _dump(page)
        return EXIT_OK
    for job in page.get("jobs", []):
        _out("  ".join(str(job.get(k) or "-") for k in
                       ("job_id", "state", "kind", "case_id", "created_at")))
    if page.get("next_cursor"):
        _err(f"more: --cursor {page['next_cursor']}")
    return EXIT_OK


def cmd_jobs_show(args: argparse.Namespace) -> int:
    _dump(_client(args).get_job(args.job_id))
    return EXIT_OK


def cmd_jobs_retry(args: argparse.Namespace) -> int:
    _dump(_client(args).retry(args.job_id))
    return EXIT_OK


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    _dump(_client(args).cancel(args.job_id))
    return EXIT_OK


def cmd_jobs_events(args: argparse.Namespace) -> int:
    _dump({"events": _client(args).events(args.job_id)})
    return EXIT_OK


def _verify_options(args: argparse.Namespace) -> Any:
    """Trust anchors from --trust (else the config's validation.trust_roots), the fetch
    mode from --fetch (else the config's), the fetch timeout from the config. The config
    is --config, else $CASESIGND_CONFIG or the default, read only when it exists."""
    from casesignd import config
    from casesignd.verify.validate import VerifyOptions, read_trust_roots

    path = config_path_from(args.config, os.environ)
    validation, base = config.Validation(), None
    if args.config or path.is_file():
        cfg = config.load(path)
        validation, base = cfg.validation, cfg
    files = ([Path(t) for t in args.trust] if args.trust else
             [base.path(t) for t in validation.trust_roots] if base is not None else [])
    try:
        roots = read_trust_roots(files)
    except OSError as e:
        raise UsageError(f"cannot read {e.filename}: {e.strerror}") from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    return VerifyOptions.within(validation.budget, roots, args.fetch or validation.fetch,
                                validation.fetch_timeout_s)
def cmd_verify(args: argparse.Namespace) -> int:
    path = _need_file(args.file)
    try:
        from casesignd.verify.validate import verify_file
    except ImportError as e:
        raise CasesignError(f"signature validation is not available: {e}",
                            code="unavailable") from None
    from casesignd.core.errors import EncryptedPdf, LimitExceeded, MalformedPdf

    options = _verify_options(args)
    try:
        report = verify_file(path, options)
    except OSError as e:
        raise UsageError(f"cannot read {args.file}: {e.strerror}") from None
    except (MalformedPdf, EncryptedPdf, LimitExceeded) as e:
        why = f" ({e.reason})" if e.reason else ""
        raise UsageError(f"{e.code}{why}: {args.file}: {e.message}") from None
    if args.report == "etsi":
        from casesignd.verify.etsi import NoSignatures, etsi_report

        try:
            sys.stdout.buffer.write(etsi_report(report) + b"\n")
            sys.stdout.flush()
        except NoSignatures as e:
            _out(f"{path}: {e.message}")
    elif args.json:
        _dump(report.to_json())
    else:
        for r in report.signatures:
            _out(r.describe())
        for finding in report.findings:
            _out(f"note: {finding}")
        if not report.signatures:
            _out(f"{path}: no signatures")
    return EXIT_OK if report.passed else EXIT_FAILED


# --- the parser -----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    p = argparse.ArgumentParser(
        prog="casesignd",
        description="A signing and document-rendering daemon, and its client.",
        epilog="Client commands read CASESIGND_URL and CASESIGND_TOKEN, else client.env "
        "next to the config (--config, $CASESIGND_CONFIG, default "
        "casesignd-state/config.toml). Exit codes: 0 done, 1 refused or failed, "
        "2 usage or config error, 3 server unreachable.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, fn: Callable[[argparse.Namespace], int], help: str,
                parent: Any = sub, client: bool = False,
                epilog: str | None = None) -> argparse.ArgumentParser:
        c = parent.add_parser(name, help=help, description=help, epilog=epilog)
        c.set_defaults(fn=fn)
        if client:
            c.add_argument("--config", metavar="PATH",
                           help="config whose client.env to read (after the environment)")
            c.add_argument("--http-timeout", type=_positive_float, default=60.0, metavar="S",
                           help="seconds to wait for the server (default 60)")
        return c

    c = command("init", cmd_init, "write a working local setup (never overwrites)")
    c.add_argument("--dir", default=DEFAULT_INIT_DIR,
                   help=f"directory to write (default {DEFAULT_INIT_DIR})")
    c.add_argument("--listen", default="127.0.0.1:8787", metavar="HOST:PORT",
                   help="address the daemon will listen on (default 127.0.0.1:8787)")
    c.add_argument("--key-type", choices=("ec", "rsa"), default="ec",
                   help="development signing key: ec (ECDSA P-256, the default) or rsa (RSA-2048)")

    c = command("serve", cmd_serve, "run the daemon")
    c.add_argument("--config", metavar="PATH",
                   help="config file (default $CASESIGND_CONFIG or casesignd-state/config.toml)")
    c.add_argument("--listen", metavar="HOST:PORT", help="override server.listen")
    c.add_argument("--node", metavar="NAME",
                   help="this daemon's name among those on one store (default: the host "
                   "name): its working files live under storage.temp_dir/NAME")

    c = command("sign", cmd_sign, "sign one PDF synchronously (POST /v1/sign)", client=True)
    c.add_argument("file", metavar="FILE")
    c.add_argument("--case", required=True, metavar="ID", help="case ID")
    c.add_argument("--policy", metavar="V", help="policy version (default: the server's)")
    c.add_argument("--signer", action="append", type=parse_signer, metavar="ID:NAME:ROLE",
                   help="a signer to record; repeatable")
    c.add_argument("-o", "--output", metavar="OUT",
                   help="where to write the signed PDF (default FILE.signed.pdf)")
    c.add_argument("--idempotency-key", metavar="K")
    add_placement(c)

    c = command("upload", cmd_upload, "upload a file to a case", client=True)
    c.add_argument("file", metavar="FILE")
    c.add_argument("--case", required=True, metavar="ID", help="case ID")

    c = command("submit", cmd_submit, "submit a job (POST /v1/jobs)", client=True)
    c.add_argument("manifest", metavar="MANIFEST.json")
    c.add_argument("--wait", action="store_true",
                   help="poll until ready, failed or canceled; exit 0 only when ready")
    c.add_argument("--timeout", type=_positive_float, default=300.0, metavar="S",
                   help="with --wait, give up after S seconds (default 300)")
    c.add_argument("--idempotency-key", metavar="K")

    jobs = sub.add_parser("jobs", help="operate jobs", description="operate jobs")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    c = command("list", cmd_jobs_list, "list jobs, newest first", jobs_sub, client=True)
    c.add_argument("--state", choices=["queued", "processing", "ready", "failed", "canceled"])
    c.add_argument("--limit", type=_positive_int, metavar="N")
    c.add_argument("--cursor", metavar="C", help="next_cursor of a previous page")
    c.add_argument("--json", action="store_true", help="print the page as JSON")
    for name, fn, text in (
        ("show", cmd_jobs_show, "show a job"),
        ("retry", cmd_jobs_retry, "retry a failed job"),
        ("cancel", cmd_jobs_cancel, "cancel a job no worker holds"),
        ("events", cmd_jobs_events, "a job's audit events, oldest first"),
    ):
        c = command(name, fn, text, jobs_sub, client=True)
        c.add_argument("job_id", metavar="ID")

    cli_store.register(sub, command)
    cli_backup.register(sub, command)
    cli_check.register(sub, command)
    cli_case.register(sub, command, _client)
    cli_admin.register(sub, command)
    cli_casesign.register_download(jobs_sub, command, _client)

    c = command("verify", cmd_verify, "validate a PDF's signatures",
                epilog="Exit 0 only when the PDF has signatures and every one (document "
                "timestamps too) is TOTAL-PASSED; 1 when one is not, or there is none; "
                "2 when FILE cannot be read as a PDF or is past a validation budget, or for a bad "
                "--trust or config.")
    c.add_argument("file", metavar="FILE.pdf")
    c.add_argument("--trust", metavar="CA.pem", action="append",
                   help="trust anchors (PEM, one or more each); repeatable; instead of the "
                   "config's validation.trust_roots. Without any, nothing is trusted.")
    c.add_argument("--config", metavar="PATH",
                   help="config whose [validation] to use (default $CASESIGND_CONFIG or "
                   "casesignd-state/config.toml, when it exists)")
    c.add_argument("--fetch", choices=("never", "missing", "always"),
                   help="online revocation data: never, missing (what the document lacks), "
                   "always (default: the config's validation.fetch, else missing)")
    c.add_argument("--json", action="store_true",
                   help="print the report as JSON: {\"signatures\": [...], \"passed\": ...}")
    c.add_argument("--report", choices=("etsi",),
                   help="etsi: print the ETSI TS 119 102-2 validation report (XML) instead")
    return p


def run(args: argparse.Namespace) -> int:
    """Run a parsed command, turning expected errors into one line and an exit code."""
    try:
        return args.fn(args)
    except UsageError as e:
        _err(f"error: {e}")
        return EXIT_USAGE
    except ConfigError as e:
        _err(f"config error: {e.key}: {e.message}")
        return EXIT_USAGE
    except ServerUnreachable as e:
        _err(e.line())
        return EXIT_UNREACHABLE
    except ClientError as e:
        _err(e.line())
        return EXIT_FAILED
    except CasesignError as e:
        extras = [refusal_text(e.reason, e.where)] if e.reason else []
        extras += [f"field {e.field}"] if e.field else []
        tail = f" ({', '.join(extras)})" if extras else ""
        _err(f"error: {e.code}: {e.message}{tail}")
        return EXIT_FAILED
    except BrokenPipeError:
        # stdout closed early (`casesignd jobs list | head`): not an error worth a line.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    except OSError as e:  # e.g. the output file cannot be written
        _err(f"error: io_error: {e.filename or ''}: {e.strerror or e}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``casesignd`` command; answers the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
