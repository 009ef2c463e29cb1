"""What a signed document may hold: the active-content rules, as data and pure functions.

The rules are an allow-list. An action (PDF 32000-1 §12.6.4) anywhere in a document
(catalog, pages, annotations, form fields, name trees, objects in object streams,
embedded PDFs) is refused unless its type is allowed by the policy; by default only
in-document ``/GoTo`` and the page-navigation ``/Named`` actions are. Keys and
annotation types that carry scripts or players are refused wherever they are.
Embedded files are refused by name (after the normalisation Windows applies to a
name) and by content (:func:`risky_content`).

:func:`action_reason`, :func:`dict_reason`, :func:`risky_file_name` and
:func:`risky_content` take values and return the reason a rule is broken, or None;
:mod:`casesignd.pdfcheck` walks the document and raises.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Mapping
from typing import Any

from .media import EXECUTABLE_TYPES, sniff_bytes

# A key whose presence means scripts or a script-bearing payload, wherever it is.
ACTIVE_KEYS: dict[str, str] = {
    "/JS": "JavaScript (/JS, PDF 32000-1 §12.6.4.16)",
    "/JavaScript": "a document-level JavaScript name tree (§7.7.4)",
    "/XFA": "an XFA form, which carries its own scripts (§12.7.8)",
    "/RichMediaContent": "rich media content (Flash/3D, ISO 32000-2 §13.7)",
    "/OnInstantiate": "a 3D stream's instantiation script (§13.6.3)",
}

# Annotation subtypes that embed players of active media (§12.5.6).
ACTIVE_SUBTYPES: dict[str, str] = {
    "/RichMedia": "a RichMedia annotation",
    "/3D": "a 3D annotation (its artwork may carry scripts, §13.6)",
    "/Movie": "a Movie annotation",
    "/Sound": "a Sound annotation",
    "/Screen": "a Screen annotation (a media player, §12.5.6.18)",
}

# Every action type of PDF 32000-1 Table 198 and ISO 32000-2 (RichMediaExecute): a
# dictionary whose /S is one of these is an action wherever it is found.
ACTION_TYPES = frozenset({
    "/GoTo", "/GoToR", "/GoToE", "/GoToDp", "/GoTo3DView", "/Launch", "/Thread", "/URI",
    "/Sound", "/Movie", "/Hide", "/Named", "/SubmitForm", "/ResetForm", "/ImportData",
    "/SetOCGState", "/Rendition", "/Trans", "/JavaScript", "/ECMAScript",
    "/RichMediaExecute",
})

# The named actions a reader performs without leaving the document (§12.6.4.11).
NAVIGATION_NAMES = frozenset({"/NextPage", "/PrevPage", "/FirstPage", "/LastPage"})

DEFAULT_ALLOWED_ACTIONS = frozenset({"/GoTo", "/Named"})

# Embedded file names a viewer hands to the operating system to run or mount, or that
# open in an application that runs their macros.
EXECUTABLE_EXTENSIONS: frozenset[str] = frozenset({
    # programs and installers
    ".exe", ".dll", ".scr", ".com", ".pif", ".msi", ".msp", ".mst", ".cpl", ".sys", ".drv",
    ".ocx", ".app", ".apk", ".appx", ".appxbundle", ".msix", ".msixbundle", ".deb", ".rpm",
    ".jar", ".jnlp", ".application", ".gadget", ".xll", ".elf", ".bin", ".run", ".dmg",
    ".pkg",
    # scripts and their hosts
    ".bat", ".cmd", ".ps1", ".psm1", ".psd1", ".ps1xml", ".vb", ".vbs", ".vbe", ".js",
    ".jse", ".mjs", ".wsf", ".wsh", ".ws", ".wsc", ".sct", ".hta", ".sh", ".bash", ".zsh",
    ".csh", ".py", ".pyw", ".pl", ".rb", ".php", ".lua", ".applescript", ".scpt",
    ".command", ".reg", ".inf", ".msc", ".scf", ".lnk", ".url", ".library-ms",
    ".settingcontent-ms", ".desktop", ".chm", ".hlp",
    # pages that run scripts in a browser
    ".html", ".htm", ".xhtml", ".xht", ".mht", ".mhtml", ".svg", ".svgz",
    # documents with macros
    ".docm", ".dotm", ".xlsm", ".xltm", ".xlsb", ".xlam", ".pptm", ".potm", ".ppsm",
    ".ppam", ".sldm", ".one", ".accde", ".mdb", ".accdb",
    # disk images, which mount with their programs
    ".iso", ".img", ".vhd", ".vhdx", ".udf",
})

# ISO 9660 volume descriptor (ECMA-119 §8.1): "CD001" at 32769.
_ISO9660_AT = 0x8001
# Legacy Office (OLE 2 compound file) magic, and the storage names VBA macros use.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_OLE_MACRO_NAMES = ("_VBA_PROJECT".encode("utf-16-le"), "Macros".encode("utf-16-le"),
                    "VBA".encode("utf-16-le") + b"\x00\x00")
# A page a browser (or mshta) runs: markup that opens with an HTML, HTA or script tag.
_HTML = re.compile(rb"(?:\xef\xbb\xbf)?\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|hta:|script|svg)\b",
                   re.I | re.S)
# How much of an embedded file's start the checks read before deciding.
HEAD_BYTES = _ISO9660_AT + 16


def _name(value: Any) -> str:
    return str(value) if value is not None else ""


def action_reason(d: Mapping[str, Any], allowed: frozenset[str]) -> str | None:
    """Why the action dictionary ``d`` (values resolved) is refused, or None.

    ``allowed``: the action types the policy allows (``/GoTo``, ``/Named``, ...);
    ``/Named`` covers the page-navigation names only, and code-running types are
    never allowed whatever ``allowed`` says.
    """
    kind = _name(d.get("/S"))
    if kind in ("/JavaScript", "/ECMAScript", "/Launch", "/ImportData", "/RichMediaExecute"):
        return f"a {kind[1:]} action"
    if kind not in allowed:
        known = kind in ACTION_TYPES
        return f"a {kind[1:] or 'typeless'} action" if known else \
            f"an unknown action type {kind[:64]!r}"
    if kind == "/Named" and _name(d.get("/N")) not in NAVIGATION_NAMES:
        return f"a named action {_name(d.get('/N'))[:64]!r} (only page navigation is allowed)"
    return None


def is_action(d: Mapping[str, Any], in_action_slot: bool) -> bool:
    """Whether ``d`` is an action: found where an action goes (``/A``, ``/OpenAction``,
    an ``/AA`` entry, ``/Next``), typed ``/Action``, or with an action's ``/S``."""
    if "/S" not in d:
        return False
    return in_action_slot or _name(d.get("/Type")) == "/Action" or \
        _name(d.get("/S")) in ACTION_TYPES


def dict_reason(d: Mapping[str, Any]) -> str | None:
    """Why a dictionary is refused for what it holds, whatever its context, or None."""
    for key, reason in ACTIVE_KEYS.items():
        if key in d:
            return reason
    # Viewers pick an annotation's kind by /Subtype alone, whatever /Type says.
    subtype = ACTIVE_SUBTYPES.get(_name(d.get("/Subtype")))
    if subtype:
        return subtype
    if "/EF" in d:
        for key in FILE_NAME_KEYS:
            value = file_name_text(d.get(key))
            if value is not None and risky_file_name(value):
                return f"an embedded file named {value[:100]!r}"
    return None


# Every name a file specification may give its file (§7.11.3, Table 44; /Unix, /DOS
# and /Mac are the old per-platform ones viewers still use).
FILE_NAME_KEYS = ("/F", "/UF", "/Unix", "/DOS", "/Mac")


def file_name_text(value: Any) -> str | None:
    """A file specification's name as text: a string as it is, bytes (a name pypdf
    could not read as text, e.g. with a NUL) as UTF-16 after a byte-order mark, else
    Latin-1; anything else (a dictionary) None."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        for bom, codec in ((b"\xfe\xff", "utf-16-be"), (b"\xff\xfe", "utf-16-le")):
            if value.startswith(bom):
                return value[2:].decode(codec, "replace")
        return value.decode("latin-1")
    return None


def windows_name(name: str) -> str:
    """A file name as Windows resolves it: cut at a NUL (C strings end there), the
    last path part, an alternate data stream cut off, trailing dots and spaces
    dropped, lower case."""
    name = name.split("\x00", 1)[0]
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = base.split(":", 1)[0] if ":" in base else base
    return base.rstrip(". \t\r\n\x00").lower()


def risky_file_name(name: str) -> bool:
    """Whether a file of this name would be run, mounted or opened with macros."""
    base = windows_name(name)
    dot = base.rfind(".")
    return dot >= 0 and base[dot:] in EXECUTABLE_EXTENSIONS


def risky_content(head: bytes, whole: bytes | None = None) -> str | None:
    """Why an embedded file's content is refused, or None. ``head``: its first
    :data:`HEAD_BYTES`; ``whole``: all of it, when it is a container to look into
    (a ZIP, an OLE compound file)."""
    kind = sniff_bytes(head)
    if kind in EXECUTABLE_TYPES:
        return f"an embedded executable file ({kind})"
    if _HTML.match(head[:1024]):
        return "an embedded HTML page or application, which runs scripts when opened"
    if head[_ISO9660_AT:_ISO9660_AT + 5] == b"CD001":
        return "an embedded disk image (ISO 9660)"
    if head.startswith(_OLE_MAGIC) and whole is not None and \
            any(m in whole for m in _OLE_MACRO_NAMES):
        return "an embedded Office file with macros (VBA)"
    if head.startswith(b"PK\x03\x04") and whole is not None:
        try:
            with zipfile.ZipFile(io.BytesIO(whole)) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, ValueError, OSError):
            return None
        for n in names:
            low = n.lower()
            if low.endswith("vbaproject.bin"):
                return "an embedded Office file with macros (vbaProject.bin)"
            if risky_file_name(n):
                return f"an embedded archive holding {n[:100]!r}"
    return None


def needs_whole(head: bytes) -> bool:
    """Whether :func:`risky_content` must see the whole file (a container), or an
    embedded PDF must be inspected in turn."""
    return head.startswith((_OLE_MAGIC, b"PK\x03\x04")) or b"%PDF-" in head[:1024]
