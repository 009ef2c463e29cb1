"""What a signed document may hold: the active-content rules, as data and pure functions.

Actions (PDF 32000-1 §12.6) are judged by who triggers them and where they lead:

* **automatic** ones — ``/OpenAction`` and every ``/AA`` trigger, anywhere — run
  without anyone asking: only in-document navigation is allowed (the policy's
  ``allowed_actions``, by default ``/GoTo`` and the page-navigation ``/Named``);
* ones **a person triggers** by clicking — a link annotation's or a form button's
  ``/A``, an outline item's, and their ``/Next`` chains — may also go into an
  embedded file the checks inspect (``/GoToE`` without ``/F``) and leave the
  document (``/URI``, ``/SubmitForm``) for a target whose scheme the policy's
  ``allowed_link_schemes`` names (``https``, ``http``, ``mailto`` by default);
  ``file:``, UNC and SMB paths, ``javascript:``, ``data:`` and anything that does not
  parse as an absolute URL are refused;
* ``/Launch``, ``/JavaScript``, ``/ImportData`` and ``/RichMediaExecute`` never,
  whatever the policy says.

Keys and annotation types that carry scripts or players are refused wherever they
are. Embedded files are refused by name (after the normalisation Windows applies to
a name) when mail and operating systems block that type (:data:`EXECUTABLE_EXTENSIONS`),
and by content (:func:`risky_content`); pages, text and pictures are documents.

Each rule returns a :data:`Rule` — the refusal's word in
:data:`casesignd.core.codes.REASONS` and a message for people — or None;
:mod:`casesignd.pdf.inspect` walks the document and raises.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from casesignd.core.media import EXECUTABLE_TYPES, sniff_bytes

# A refusal: its word in casesignd.core.codes.REASONS, and a message for people.
Rule = tuple[str, str]

# A key whose presence means scripts or a script-bearing payload, wherever it is.
ACTIVE_KEYS: dict[str, Rule] = {
    "/JS": ("javascript", "JavaScript (/JS, PDF 32000-1 §12.6.4.16)"),
    "/JavaScript": ("javascript", "a document-level JavaScript name tree (§7.7.4)"),
    "/XFA": ("xfa_form", "an XFA form, which carries its own scripts (§12.7.8)"),
    "/RichMediaContent": ("active_media", "rich media content (Flash/3D, ISO 32000-2 §13.7)"),
    "/OnInstantiate": ("javascript", "a 3D stream's instantiation script (§13.6.3)"),
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
# Action types that run code or start programs: refused whoever triggers them.
NEVER_ACTIONS = frozenset({"/JavaScript", "/ECMAScript", "/Launch", "/ImportData",
                           "/RichMediaExecute"})

# The named actions a reader performs without leaving the document (§12.6.4.11).
NAVIGATION_NAMES = frozenset({"/NextPage", "/PrevPage", "/FirstPage", "/LastPage"})
# And those a click may also ask of the viewer (Acrobat's own names, which forms'
# Back and Print buttons use): its page history, and its print dialog.
CLICK_NAMES = NAVIGATION_NAMES | {"/GoBack", "/GoForward", "/Print"}

DEFAULT_ALLOWED_ACTIONS = frozenset({"/GoTo", "/Named"})
# What a click may do besides the policy's allowed_actions: go into an embedded file
# the checks inspect, follow a link, send a form to an allowed target.
CLICK_ACTIONS = frozenset({"/GoToE", "/URI", "/SubmitForm"})
DEFAULT_LINK_SCHEMES = frozenset({"https", "http", "mailto"})

# Who triggers an action: nobody (it runs when the document opens, a page shows, a
# field is reached: /OpenAction, /AA), or a person who clicks (/A, /PA, an outline
# item). An action found outside any such slot is run by no viewer; it is judged as
# a click's, which is the stricter of the two for where it may lead.
AUTOMATIC = "automatic"
CLICK = "click"

# Keys whose value is an action a viewer runs by itself (§12.6.2: the document's open
# action; an /AA dictionary's entries are too), and those a person's click runs (an
# annotation's or outline item's /A, §12.5.6.5, §12.3.3; a page object's /PA in an
# article thread). /Next continues the trigger of the action it belongs to.
_AUTOMATIC_SLOTS = frozenset({"/OpenAction"})
_CLICK_SLOTS = frozenset({"/A", "/PA"})


def child_trigger(key: str, via: str, trigger: str | None) -> str | None:
    """Who triggers the value under ``key`` of a dictionary found under ``via`` that is
    itself triggered by ``trigger`` (None: not an action slot). Pure."""
    if key in _AUTOMATIC_SLOTS or via == "/AA":
        return AUTOMATIC
    if key == "/Next":
        return trigger or CLICK
    if key in _CLICK_SLOTS:
        return AUTOMATIC if trigger == AUTOMATIC else CLICK
    return None


# Embedded file names a viewer hands to the operating system to run or mount, or
# that open in an application that runs their macros. The Windows types are
# Windows Attachment Manager's high-risk list and Outlook's blocked attachment list;
# to them come other systems' programs and installers, Office files with macros and
# disk images (which Windows mounts, their programs then without the download mark).
# Pages (.html), text and pictures are documents, as mail treats them.
EXECUTABLE_EXTENSIONS: frozenset[str] = frozenset({
    # Outlook's blocked types and Attachment Manager's high-risk types
    ".ade", ".adp", ".app", ".application", ".appref-ms", ".asp", ".aspx", ".asx", ".bas",
    ".bat", ".bgi", ".cab", ".cer", ".chm", ".cmd", ".cnt", ".com", ".cpl", ".crt", ".csh",
    ".der", ".diagcab", ".exe", ".fxp", ".gadget", ".grp", ".hlp", ".hpj", ".hta", ".htc",
    ".inf", ".ins", ".isp", ".its", ".jar", ".jnlp", ".js", ".jse", ".ksh", ".lnk", ".mad",
    ".maf", ".mag", ".mam", ".maq", ".mar", ".mas", ".mat", ".mau", ".mav", ".maw", ".mcf",
    ".mda", ".mdb", ".mde", ".mdt", ".mdw", ".mdz", ".msc", ".msh", ".msh1", ".msh2",
    ".mshxml", ".msh1xml", ".msh2xml", ".msi", ".msp", ".mst", ".msu", ".ops", ".osd",
    ".pcd", ".pif", ".pl", ".plg", ".prf", ".prg", ".printerexport", ".ps1", ".ps1xml",
    ".ps2", ".ps2xml", ".psc1", ".psc2", ".psd1", ".psdm1", ".psm1", ".pst", ".py", ".pyc",
    ".pyo", ".pyw", ".pyz", ".pyzw", ".reg", ".scf", ".scr", ".sct", ".shb", ".shs",
    ".theme", ".tmp", ".url", ".vb", ".vbe", ".vbp", ".vbs", ".vhd", ".vhdx", ".vsmacros",
    ".vss", ".vst", ".vsw", ".webpnp", ".website", ".ws", ".wsb", ".wsc", ".wsf", ".wsh",
    ".xbap", ".xll", ".xnk", ".appcontent-ms", ".settingcontent-ms", ".library-ms",
    ".search-ms", ".searchconnector-ms",
    # Windows programs those lists leave to the content check, and other systems'
    ".dll", ".sys", ".drv", ".ocx", ".appx", ".appxbundle", ".msix", ".msixbundle",
    ".apk", ".deb", ".rpm", ".dmg", ".pkg", ".sh", ".bash", ".zsh", ".command",
    ".desktop", ".applescript", ".scpt", ".mjs", ".rb", ".php", ".lua",
    # documents with macros
    ".docm", ".dotm", ".xlsm", ".xltm", ".xlsb", ".xlam", ".pptm", ".potm", ".ppsm",
    ".ppam", ".sldm", ".one", ".accde",
    # disk images, which mount with their programs
    ".iso", ".img", ".udf",
})

# ISO 9660 volume descriptor (ECMA-119 §8.1): "CD001" at 32769.
_ISO9660_AT = 0x8001
# Legacy Office (OLE 2 compound file) magic, and the storage names VBA macros use.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_OLE_MACRO_NAMES = ("_VBA_PROJECT".encode("utf-16-le"), "Macros".encode("utf-16-le"),
                    "VBA".encode("utf-16-le") + b"\x00\x00")
# An HTML application (mshta runs it with the user's rights, outside any browser's
# sandbox) declares itself in its head. A plain page is a document.
_HTA = re.compile(rb"<hta:application\b", re.I)
# How much of an embedded file's start the checks read before deciding.
HEAD_BYTES = _ISO9660_AT + 16


def _name(value: Any) -> str:
    return str(value) if value is not None else ""


def action_rule(d: Mapping[str, Any], allowed: frozenset[str], trigger: str = AUTOMATIC,
                schemes: frozenset[str] = DEFAULT_LINK_SCHEMES) -> Rule | None:
    """Why the action dictionary ``d`` (values resolved) is refused, or None.

    ``allowed``: the action types the policy allows anywhere (``/GoTo``, ``/Named``,
    ...); ``/Named`` covers the page-navigation names only. ``trigger``: who runs it
    (:data:`AUTOMATIC` or :data:`CLICK`); a click may also go into an embedded file
    and leave for a target of one of ``schemes``. Code-running types are never
    allowed whatever ``allowed`` says.
    """
    kind = _name(d.get("/S"))
    if kind in ("/JavaScript", "/ECMAScript"):
        return "javascript", f"a {kind[1:]} action"
    if kind in NEVER_ACTIONS:
        return "forbidden_action", f"a {kind[1:]} action"
    if kind in CLICK_ACTIONS:
        # Where it leads is checked whoever triggers it, even where the policy allows
        # the type itself everywhere.
        if trigger == AUTOMATIC and kind not in allowed:
            return "automatic_action", (f"a {kind[1:]} action that runs without a click "
                                        "(/OpenAction or /AA)")
        return _click_target_rule(kind, d, schemes)
    if kind not in allowed:
        if kind in ACTION_TYPES:
            return "forbidden_action", f"a {kind[1:]} action"
        return "forbidden_action", (f"an unknown action type {kind[:64]!r}" if kind
                                    else "a typeless action")
    names = CLICK_NAMES if trigger == CLICK else NAVIGATION_NAMES
    if kind == "/Named" and _name(d.get("/N")) not in names:
        return "forbidden_action", (f"a named action {_name(d.get('/N'))[:64]!r} "
                                    "(only page navigation is allowed"
                                    + (", and Back, Forward and Print on a click)"
                                       if trigger == CLICK else " without a click)"))
    return None


def _click_target_rule(kind: str, d: Mapping[str, Any], schemes: frozenset[str]) -> Rule | None:
    if kind == "/GoToE":
        # Without /F the target is a file embedded in this document (§12.6.4.4), which
        # the checks inspect as they inspect this one.
        if "/F" in d:
            return "link_scheme", "a GoToE action into a file outside the document"
        return None
    target = d.get("/URI") if kind == "/URI" else submit_target(d.get("/F"))
    why = link_target_refusal(target, schemes)
    if why is None:
        return None
    return "link_scheme", f"a {kind[1:]} action to {why}"


def submit_target(value: Any) -> Any:
    """The URL a SubmitForm action's ``/F`` names: a URL file specification
    (``/FS /URL``, §7.11.5) gives its ``/F`` (or ``/UF``); a string is the target."""
    if isinstance(value, Mapping):
        return value.get("/F", value.get("/UF"))
    return value


def link_target_refusal(target: Any, schemes: frozenset[str]) -> str | None:
    """What is wrong with a link's target (words, without the target itself), or None
    when it is an absolute URL of one of ``schemes``. Pure."""
    text = file_name_text(target)
    if text is None:
        return "a target that is not a URL"
    # Viewers hand the target on as a C string (it ends at a NUL) and trim white
    # space around it, as URL parsers do.
    text = text.split("\x00", 1)[0].strip(" \t\r\n\x0c")
    if not text or any(ord(c) < 0x21 or c in "\\\x7f" for c in text):
        # White space, control characters or back slashes: viewers and the systems
        # they hand a URL to clean such a target up in ways of their own (a UNC
        # path, \\host\share, is the classic).
        return "a target that is not a plain URL (white space, control characters or \\)"
    try:
        parts = urlsplit(text)
    except ValueError:
        return "a target that does not parse as a URL"
    scheme = parts.scheme.lower()
    if not scheme:
        return "a target without a scheme (a path, not a URL)"
    if scheme not in schemes:
        return f"a {scheme[:16]}: target (not among the policy's allowed_link_schemes)"
    if scheme in ("http", "https") and not parts.hostname:
        return f"an {scheme} target without a host"
    if scheme == "mailto" and not parts.path:
        return "a mailto target without an address"
    return None


def is_external_link(d: Mapping[str, Any]) -> bool:
    """Whether an allowed action leaves the document (a URI or a form submission)."""
    return _name(d.get("/S")) in ("/URI", "/SubmitForm")


def is_action(d: Mapping[str, Any], in_action_slot: bool) -> bool:
    """Whether ``d`` is an action: found where an action goes (``/A``, ``/OpenAction``,
    an ``/AA`` entry, ``/Next``), typed ``/Action``, or with an action's ``/S``."""
    if "/S" not in d:
        return False
    return in_action_slot or _name(d.get("/Type")) == "/Action" or \
        _name(d.get("/S")) in ACTION_TYPES


def dict_rule(d: Mapping[str, Any]) -> Rule | None:
    """Why a dictionary is refused for what it holds, whatever its context, or None."""
    for key, rule in ACTIVE_KEYS.items():
        if key in d:
            return rule
    # Viewers pick an annotation's kind by /Subtype alone, whatever /Type says.
    subtype = ACTIVE_SUBTYPES.get(_name(d.get("/Subtype")))
    if subtype:
        return "active_media", subtype
    if "/EF" in d:
        for key in FILE_NAME_KEYS:
            value = file_name_text(d.get(key))
            if value is not None and risky_file_name(value):
                return "executable_attachment", f"an embedded file named {value[:100]!r}"
    return None


def embedded_file_name(d: Mapping[str, Any]) -> str | None:
    """The name a file specification gives its file (the first of
    :data:`FILE_NAME_KEYS` that is text), for a refusal's ``where``."""
    for key in FILE_NAME_KEYS:
        value = file_name_text(d.get(key))
        if value is not None:
            return value[:100]
    return None


# Every name a file specification may give its file (§7.11.3, Table 44; /Unix, /DOS
# and /Mac are the old per-platform ones viewers still use).
FILE_NAME_KEYS = ("/UF", "/F", "/Unix", "/DOS", "/Mac")


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
    if _HTA.search(head[:4096]):
        return "an embedded HTML application, which runs with the user's rights"
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
