"""``casesignd check FILE.pdf``: the signing decision for one document, offline.

The same checks a job's document goes through before the key is used
(:func:`casesignd.signing.pipeline.check`), under a policy of the config, without a key, a
daemon or a store: the verdict (signed as it is, signed once rewritten, or refused),
the refusal's code, reason and where, and what a normalisation would change. An
operator runs it to tune a policy before the first job; nothing is written but a
rewrite in a temporary directory, removed again.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from casesignd.cli.client import config_path_from, refusal_text
from casesignd.cli.common import CONFIG_HELP, EXIT_FAILED, EXIT_OK, Command, UsageError, dump, out
from casesignd.core.errors import CasesignError
from casesignd.core.sealed import plain_size

SIGN = "sign"
REWRITE = "sign_rewritten"
REFUSE = "refuse"


def verdict(path: Path, limits: Any) -> dict[str, Any]:
    """The decision on the document at ``path`` under ``limits`` (a
    :class:`~casesignd.pdf.limits.PdfLimits`), as the JSON ``check`` prints."""
    from casesignd.signing import pipeline

    with tempfile.TemporaryDirectory(prefix="casesignd-check-") as work:
        try:
            checked, source, reader = pipeline.check(path, limits, Path(work) / "rewrite.pdf")
        except CasesignError as e:
            out: dict[str, Any] = {"verdict": REFUSE, "code": e.code, "message": e.message}
            if e.reason:
                out["reason"] = e.reason
            if e.where:
                out["where"] = dict(e.where)
            return out
        reader.stream.close()
        result: dict[str, Any] = {
            "verdict": REWRITE if checked.normalized else SIGN,
            "pages": checked.pages,
            "received_sha256": checked.received_sha256,
            "external_links": checked.external_links,
        }
        if checked.normalized:
            result["normalize"] = {
                "reasons": list(checked.reasons),
                "signed_sha256": checked.source_sha256,
                "received_bytes": path.stat().st_size,
                "signed_bytes": len(source) if isinstance(source, bytes)
                else plain_size(source),
            }
        return result


def _limits(args: argparse.Namespace) -> Any:
    """The limits of the policy --policy names (else the config's default policy); a
    missing config gives the built-in policy."""
    from casesignd import config
    from casesignd.core.policy import Policy
    from casesignd.job_kinds.signing import pdf_limits

    path = config_path_from(args.config, os.environ)
    if not (args.config or path.is_file()):
        if args.policy:
            raise UsageError(f"--policy {args.policy}: no config at {path} names policies")
        return pdf_limits(Policy(version="built-in"))
    cfg = config.load(path)
    policy = cfg.policy(args.policy)
    if policy is None:
        names = ", ".join(p.version for p in cfg.policies) or "none"
        raise UsageError(f"no policy {args.policy or cfg.default_policy!r} in {path} "
                         f"(it has: {names})")
    return pdf_limits(policy)


def cmd_check(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"cannot read {args.file}: no such file")
    result = verdict(path, _limits(args))
    if args.json:
        dump(result)
    elif result["verdict"] == REFUSE:
        why = f" ({refusal_text(result['reason'], result.get('where'))})" \
            if "reason" in result else ""
        out(f"{path}: refused: {result['code']}: {result['message']}{why}")
    else:
        n, links = result["pages"], result["external_links"]
        facts = f"{n} page{'s' if n != 1 else ''}" + (
            f", {links} external link{'s' if links != 1 else ''}" if links else "")
        line = f"{path}: signed as it is ({facts})"
        if result["verdict"] == REWRITE:
            line = (f"{path}: signed once rewritten ({facts}): "
                    + "; ".join(result["normalize"]["reasons"]))
        out(line)
    return EXIT_FAILED if result["verdict"] == REFUSE else EXIT_OK


def register(sub: Any, command: Command) -> None:
    """Adds ``check``."""
    c = command("check", cmd_check,
                "the signing decision for a PDF, offline and without the key",
                epilog="Runs the checks a job's document goes through before it is "
                "signed, under a policy of the config: signed as it is, signed once "
                "rewritten into one unambiguous PDF (and why), or refused (code, reason, "
                "where). Exit 0 it would be signed, 1 refused, 2 FILE or the config "
                "cannot be read.")
    c.add_argument("file", metavar="FILE.pdf")
    c.add_argument("--policy", metavar="V",
                   help="the policy version to judge by (default: the config's default)")
    c.add_argument("--config", metavar="PATH", help=CONFIG_HELP + "; without one, the "
                   "built-in policy")
    c.add_argument("--json", action="store_true",
                   help="print {\"verdict\": \"sign\" | \"sign_rewritten\" | \"refuse\", ...}")
