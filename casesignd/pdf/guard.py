"""pypdf under the checks' rules: its errors translated into ours, its repairs collected.

pypdf reads damaged files leniently and says what it repaired through
``pypdf._utils.logger_warning``, the function its docs name as the place to override.
:func:`translated` runs a block of pypdf calls with a bound on declared stream lengths,
turns whatever pypdf raises into :mod:`casesignd.core.errors`, and yields the list of repair
messages made on this thread meanwhile; :func:`warning_finding` sorts one into damage
or ambiguity.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pypdf._configuration import apply_configuration
from pypdf.errors import FileNotDecryptedError, LimitReachedError

from casesignd.core.errors import CasesignError, EncryptedPdf, LimitExceeded, MalformedPdf
from casesignd.pdf.frame import AMBIGUITY, DAMAGE, Finding

# Library warnings kept in a report.
MAX_WARNINGS = 20


# pypdf reports what it repaired through ``pypdf._utils.logger_warning``, which its
# docs name as the place to override. While a thread inspects a file, the messages
# are kept for the report (and still logged): the verdict must not depend on how the
# process configured logging (a quiet pypdf logger would otherwise hide every repair).
_INSPECTING: dict[int, list[str]] = {}


_HOOK: dict[str, Any] = {}


def _hook_pypdf_warnings() -> None:
    """Wrap pypdf's ``logger_warning`` in every pypdf module that imported it; again
    whenever modules were imported since (pypdf imports some lazily)."""
    if _HOOK.get("modules") == len(sys.modules):
        return
    from pypdf import _utils

    if "original" not in _HOOK:
        # pypdf's records go wherever the process's logging sends them; in a worker
        # process that configured none they are dropped, never printed bare by
        # logging's last-resort handler into the daemon's JSON log.
        logging.getLogger("pypdf").addHandler(logging.NullHandler())
        # pdfparse says its own repairs the way pypdf does, under its own name.
        logging.getLogger("casesignd.pdf.parse").addHandler(logging.NullHandler())
    original = _HOOK.setdefault("original", _utils.logger_warning)

    def kept(message: str, *, source: str, **values: Any) -> None:
        found = _INSPECTING.get(threading.get_ident())
        if found is not None and len(found) < MAX_WARNINGS:
            try:
                text = message % values if values else message
            except (TypeError, ValueError, KeyError):
                text = message
            found.append(text[:200])
        original(message, source=source, **values)

    hook = _HOOK.setdefault("hook", kept)
    for name, module in list(sys.modules.items()):
        if (name == "pypdf" or name.startswith("pypdf.")) and \
                getattr(module, "logger_warning", None) is original:
            module.logger_warning = hook  # type: ignore[attr-defined]
    _HOOK["modules"] = len(sys.modules)


# pypdf warnings are repairs (damage), except those that say two readings of the
# same bytes are possible: a key defined twice (pypdf keeps the first, qpdf and poppler
# the last), an object read twice with different results.
_AMBIGUITY_WORDS = ("multiple definitions", "overwriting cache", "duplicate",
                    "does not end at its endstream",
                    # the xref named a place holding another object's header
                    "ref repaired")


# Where a pypdf message starts quoting the document's bytes (b'...', "@offset: ...").
_QUOTED = re.compile(r"""\s*(?:b['"]|@\d+:|\(nd=|['"]).*""", re.S)


def warning_finding(message: str) -> Finding:
    """A pypdf warning as a finding (pure). The message is cut where it would quote
    the document: findings go to the audit trail and the log, which hold no content."""
    low = message.lower()
    kind = AMBIGUITY if any(w in low for w in _AMBIGUITY_WORDS) else DAMAGE
    said = _QUOTED.sub("", message)[:120].rstrip(" :;,(") or "a repair"
    word = "duplicate_key" if "multiple definitions" in low or "duplicate" in low else (
        "xref_conflict" if "overwriting cache" in low or "ref repaired" in low else "")
    return Finding(kind, f"the parser had to guess: {said}", word)


@contextmanager
def translated(max_stream_bytes: int) -> Iterator[list[str]]:
    """Run pypdf with our limits and turn whatever it raises into our errors."""
    _hook_pypdf_warnings()
    thread = threading.get_ident()
    warnings: list[str] = []
    outer = _INSPECTING.get(thread)
    _INSPECTING[thread] = warnings
    try:
        with apply_configuration(maximum_declared_stream_length=max_stream_bytes):
            yield warnings
    except CasesignError:
        raise
    except FileNotDecryptedError as e:
        raise EncryptedPdf("the PDF is encrypted", detail={"library": str(e)},
                           reason="password_encryption") from None
    except LimitReachedError as e:
        raise LimitExceeded("the PDF exceeds a parser limit",
                            detail={"library": str(e)}, reason="too_many_objects") from None
    except RecursionError:
        raise MalformedPdf("the PDF nests objects too deeply to read") from None
    except MemoryError:
        raise LimitExceeded("the PDF needs more memory than allowed",
                            reason="decompression_bomb") from None
    except Exception as e:  # pypdf raises many types on damaged input
        if "encrypt" in str(e).lower():
            # pypdf reads only the standard security handler: any other (public-key,
            # a vendor's) fails while the reader opens.
            public = any(w in str(e).lower() for w in ("pubsec", "pkcs7", "public"))
            raise EncryptedPdf("the PDF is encrypted" + (
                " for its recipients' certificates" if public else ""),
                detail={"library": str(e)[:300]},
                reason="public_key_encryption" if public else "password_encryption") from None
        raise MalformedPdf("the PDF is damaged and cannot be read",
                           detail={"library": f"{type(e).__name__}: {e}"[:500],
                                   "warnings": list(warnings)}) from None
    finally:
        if outer is None:
            del _INSPECTING[thread]
        else:
            _INSPECTING[thread] = outer
