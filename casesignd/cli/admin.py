"""The operator's commands: ``admin queues``, ``admin nodes``, ``admin pause`` and
``admin resume``, ``admin retry`` and ``admin cancel`` (``/v1/admin``,
:mod:`casesignd.http.admin`), with the operator's token.

The token comes from ``$CASESIGND_OPERATOR_TOKEN``, else the file
``$CASESIGND_OPERATOR_TOKEN_FILE`` (or ``--token-file``) names, else
``CASESIGND_OPERATOR_TOKEN`` in ``client.env``; the daemon's URL as every client
command finds it (:mod:`casesignd.cli.client`). The daemon answers any other token
404 on these paths; the commands say that the token is not the operator's.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from casesignd.cli.client import (
    Client,
    ClientError,
    config_path_from,
    load_settings,
    parse_env_file,
)
from casesignd.cli.common import EXIT_FAILED, EXIT_OK, Command, UsageError, dump, out

TOKEN_ENV = "CASESIGND_OPERATOR_TOKEN"
TOKEN_FILE_ENV = "CASESIGND_OPERATOR_TOKEN_FILE"


def operator_token(args: argparse.Namespace) -> str:
    """The operator's token; see the module docstring."""
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV].strip()
    path = args.token_file or os.environ.get(TOKEN_FILE_ENV)
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise UsageError(f"cannot read the operator's token from {path}: {e.strerror}") from None
    env_path = config_path_from(args.config, os.environ).parent / "client.env"
    try:
        token = parse_env_file(env_path.read_text(encoding="utf-8")).get(TOKEN_ENV)
    except OSError:
        token = None
    if not token:
        raise UsageError(f"no operator token: set {TOKEN_ENV} or {TOKEN_FILE_ENV}, or "
                         "give --token-file")
    return token


def _client(args: argparse.Namespace) -> Client:
    return Client(load_settings(args.config).url, operator_token(args),
                  timeout_s=args.http_timeout)


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    try:
        return _client(args)._json(method, path, body)[1]
    except ClientError as e:
        if e.status == 404 and e.code == "not_found":
            raise ClientError(404, e.code, "the daemon took the token for no operator's: "
                              "check the operator token (its SHA-256 is [operator] "
                              "token_sha256 in the daemon's config)") from None
        raise


def _since(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def queues(args: argparse.Namespace) -> int:
    found = _call(args, "GET", "/v1/admin/queues")
    if args.json:
        dump(found)
        return EXIT_OK
    out(f"{'TENANT':<20} {'KIND':<18} {'QUEUED':>7} {'RETRY':>6} {'RUNNING':>7} "
        f"{'FAILED':>7} {'OLDEST':>9}")
    for q in found["queues"]:
        out(f"{q['tenant']:<20} {q['kind']:<18} {q['queued']:>7} {q['retry_wait']:>6} "
            f"{q['running']:>7} {q['failed']:>7} {_since(q['oldest_wait_s']):>9}")
    for p in found["pauses"]:
        out(f"paused: {_pause_words(p)} since {p['since']} by {p['actor']}")
    return EXIT_OK


def _pause_words(p: dict[str, Any]) -> str:
    parts = [f"tenant {p['tenant']}" if p.get("tenant") else "every tenant",
             f"kind {p['kind']}" if p.get("kind") else "every kind"]
    return ", ".join(parts)


def nodes(args: argparse.Namespace) -> int:
    found = _call(args, "GET", "/v1/admin/nodes")
    if args.json:
        dump(found)
        return EXIT_OK
    out(f"{'NODE':<24} {'CONNECTED':<9} {'LEASES':>6}  LAST HEARTBEAT")
    for n in found["nodes"]:
        out(f"{n['node']:<24} {'yes' if n['connected'] else 'no':<9} {n['leases']:>6}  "
            f"{n['last_heartbeat_at'] or '-'}")
    return EXIT_OK


def _pause_change(args: argparse.Namespace, verb: str) -> int:
    found = _call(args, "POST", f"/v1/admin/{verb}", {"tenant": args.tenant, "kind": args.kind})
    what = _pause_words({"tenant": args.tenant, "kind": args.kind})
    if verb == "pause":
        out(f"paused: {what}" if found["changed"] else f"already paused: {what}")
    else:
        out(f"resumed: {what}" if found["changed"] else f"no such pause: {what}")
    return EXIT_OK


def pause(args: argparse.Namespace) -> int:
    return _pause_change(args, "pause")


def resume(args: argparse.Namespace) -> int:
    return _pause_change(args, "resume")


def _selection(args: argparse.Namespace) -> dict[str, Any]:
    if args.job_ids:
        if args.tenant or args.kind or getattr(args, "code", None):
            raise UsageError("name jobs by ID or by --tenant (and --kind, --code), not both")
        return {"job_ids": args.job_ids}
    if not args.tenant:
        raise UsageError("name the jobs: IDs, or --tenant T (with --kind, --code)")
    body = {"tenant": args.tenant, "kind": args.kind}
    if getattr(args, "code", None):
        body["code"] = args.code
    return {k: v for k, v in body.items() if v}


def _bulk(args: argparse.Namespace, verb: str, word: str) -> int:
    done = 0
    refused = 0
    while True:
        found = _call(args, "POST", f"/v1/admin/jobs/{verb}", _selection(args))
        for job_id in found["done"]:
            out(f"{word} {job_id}")
        for r in found["refused"]:
            out(f"refused {r['job_id']} {r['code']}")
        done += len(found["done"])
        refused += len(found["refused"])
        # A filter matched more than one request changes: the jobs changed no longer
        # match it, so the next request finds the rest.
        if not found["more"] or not found["done"]:
            break
    out(f"{word} {done}, refused {refused}")
    return EXIT_FAILED if refused else EXIT_OK


def retry(args: argparse.Namespace) -> int:
    if not args.failed:
        raise UsageError("admin retry retries failed jobs: say --failed")
    return _bulk(args, "retry", "retried")


def cancel(args: argparse.Namespace) -> int:
    return _bulk(args, "cancel", "canceled")


def register(sub: Any, command: Command) -> None:
    """Adds ``admin queues / nodes / pause / resume / retry / cancel``."""
    group = sub.add_parser("admin", help="the operator's view of the whole service",
                           description="the operator's view of the whole service (the "
                           f"operator's token: ${TOKEN_ENV}, ${TOKEN_FILE_ENV} or --token-file)")
    admin_sub = group.add_subparsers(dest="admin_command", metavar="ACTION", required=True)

    def verb(name: str, fn: Any, text: str) -> argparse.ArgumentParser:
        c = command(name, fn, text, admin_sub, client=True)
        c.add_argument("--token-file", metavar="PATH", help="a file holding the operator's token")
        return c

    for name, fn, text in (("queues", queues, "jobs waiting, running and failed per tenant "
                            "and kind, and the pauses"),
                           ("nodes", nodes, "the daemons on the store, their leases and "
                            "heartbeats")):
        verb(name, fn, text).add_argument("--json", action="store_true", help="print JSON")
    for name, fn, text in (("pause", pause, "hold the claims of a tenant, a kind or both "
                            "(admission goes on)"),
                           ("resume", resume, "let the claims a pause held go again")):
        c = verb(name, fn, text)
        c.add_argument("--tenant", metavar="T", help="this tenant's jobs (default: every tenant's)")
        c.add_argument("--kind", metavar="K", help="jobs of this kind (default: every kind)")
    for name, fn, text in (("retry", retry, "retry failed jobs, by ID or by filter"),
                           ("cancel", cancel, "cancel queued jobs, by ID or by filter")):
        c = verb(name, fn, text)
        c.add_argument("job_ids", nargs="*", metavar="ID")
        c.add_argument("--tenant", metavar="T")
        c.add_argument("--kind", metavar="K")
        if name == "retry":
            c.add_argument("--failed", action="store_true", help="the failed jobs (required)")
            c.add_argument("--code", metavar="C", help="failed with this error code")
