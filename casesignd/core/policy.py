"""``[[policies]]``: a signing policy, as settings, and the checks of its own keys.

The numbers and words are the configuration's; the job kinds turn a policy into the
values the checks and the signing code take (:mod:`casesignd.job_kinds.signing`), and
the config reads this one struct, so it needs nothing of their code. What a policy
asks of other sections (trust roots from B-LT up) the config checks itself.
"""

from __future__ import annotations

import re

import msgspec

from casesignd.core.appearance import APPEARANCES, CERTIFY_P, box_problem

MiB = 1024 * 1024

NORMALIZE_MODES = ("never", "when_needed", "always")
# PAdES baseline levels, lowest first (ETSI EN 319 142-1).
LEVELS = ("B-B", "B-T", "B-LT", "B-LTA")
LINK_SCHEMES = ("https", "http", "mailto")
# Actions a policy may allow (PDF 32000-1 §12.6.4.1, Table 198). JavaScript, Launch,
# ImportData and RichMediaExecute run code or read local files and are never allowed.
ALLOWABLE_ACTIONS = ("GoTo", "Named", "URI", "GoToR", "GoToE", "GoTo3DView", "Thread",
                     "Hide", "SetOCGState", "Rendition", "Trans", "SubmitForm", "ResetForm",
                     "Sound", "Movie")
UNSAFE_LINK_SCHEMES = frozenset({"file", "smb", "javascript", "vbscript", "data", "jar"})  # files, code
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}")
_VERSION = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class Policy(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    version: str
    evidence_media_types: list[str] = msgspec.field(
        default_factory=lambda: ["application/pdf", "image/jpeg", "image/png", "text/plain"]
    )
    max_pages: int = 5000
    max_document_bytes: int = 256 * MiB
    max_items: int = 100
    forbid_active_content: bool = True
    # Deep PDF validation (casesignd.pdf.inspect): the largest decoded size of any one
    # stream or image (decompression bombs), reachable objects, and nesting depth.
    max_decoded_stream_bytes: int = 256 * MiB
    max_pdf_objects: int = 1_000_000
    max_pdf_depth: int = 64
    # Decoded bytes of all streams of one document together, and CPU seconds one
    # document's checks may take: a document past either is refused limit_exceeded.
    max_decoded_document_bytes: int = 1024 * MiB
    max_check_cpu_s: float = 20.0
    # A document whose readers could disagree (a parser differential, damage a reader
    # repairs) and that carries no signature yet is rewritten into one unambiguous
    # PDF before it is signed: "when_needed"; "always" rewrites every unsigned
    # document; "never" refuses them (ambiguous_pdf / malformed_pdf).
    normalize: str = "when_needed"
    # Action types (§12.6.4) allowed anywhere, automatic ones too ("Named": page
    # navigation only); casesignd.pdf.rules says what else a click may do.
    allowed_actions: list[str] = msgspec.field(default_factory=lambda: ["GoTo", "Named"])
    # Where a clicked link or form button may lead, by URL scheme ([]: nowhere).
    allowed_link_schemes: list[str] = msgspec.field(default_factory=lambda: list(LINK_SCHEMES))
    # The PAdES baseline level (ETSI EN 319 142-1) every signature of this policy
    # meets: "B-B", "B-T" (a signature timestamp from tsa_url), "B-LT" (certificates
    # and revocation data of every chain in the document's /DSS) or "B-LTA" (and a
    # document timestamp over them). Empty: B-T when tsa_url is set, else B-B.
    level: str = ""
    # An RFC 3161 TSA: required from B-T up.
    tsa_url: str = ""
    tsa_timeout_s: float = 10.0
    reason: str = ""
    location: str = ""
    # Where the signature goes unless a request says (casesignd.signing.placement): "invisible",
    # or "visible": a stamp on signature_page (negative: from the end) in
    # signature_box ([x1, y1, x2, y2], points), or in the field signature_field.
    appearance: str = "invisible"
    signature_page: int = 1
    signature_box: list[float] = msgspec.field(default_factory=lambda: [36.0, 36.0, 236.0, 96.0])
    signature_field: str = ""
    # A visible stamp shows the tenant's logo (its invoice branding's), when it has one.
    stamp_logo: bool = False
    # Certify the document's first signature (DocMDP, PDF 32000-1 §12.8.2.2): "" not,
    # "no_changes" (P=1), "form_filling" (P=2) or "annotations" (P=3).
    certify: str = ""

    @property
    def signature_level(self) -> str:
        """The level this policy's signatures meet (``level``, or what ``tsa_url`` implies)."""
        return self.level or ("B-T" if self.tsa_url else "B-B")

    def at_least(self, level: str) -> bool:
        """Whether this policy's signatures meet ``level`` or a higher one."""
        return LEVELS.index(self.signature_level) >= LEVELS.index(level)


    def problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) for each of its own settings out of range, in the order
        the config reports them."""
        out = []
        if not _VERSION.match(self.version):
            out.append(("version", f"invalid version {self.version!r}"))
        if self.normalize not in NORMALIZE_MODES:
            out.append(("normalize", f"expected one of {', '.join(NORMALIZE_MODES)}, "
                                     f"got {self.normalize!r}"))
        for a in self.allowed_actions:
            if a not in ALLOWABLE_ACTIONS:
                out.append(("allowed_actions",
                            f"{a!r} cannot be allowed; choose from {', '.join(ALLOWABLE_ACTIONS)}"))
        for scheme in self.allowed_link_schemes:
            if scheme.lower() in UNSAFE_LINK_SCHEMES or not _SCHEME.fullmatch(scheme):
                out.append(("allowed_link_schemes", f"{scheme!r} cannot be allowed; never "
                                                    f"{', '.join(sorted(UNSAFE_LINK_SCHEMES))}"))
        out += self._placement_problems()
        if self.level and self.level not in LEVELS:
            out.append(("level", f"expected one of {', '.join(LEVELS)}, got {self.level!r}"))
        elif self.at_least("B-T") and not self.tsa_url:
            out.append(("tsa_url", f"level {self.level} needs a TSA"))
        return out

    def _placement_problems(self) -> list[tuple[str, str]]:
        out = []
        if self.appearance not in APPEARANCES:
            out.append(("appearance", f"expected one of {', '.join(APPEARANCES)}, "
                                      f"got {self.appearance!r}"))
        if self.signature_page == 0:
            out.append(("signature_page", "pages count from 1 (or from -1, the last)"))
        if self.certify and self.certify not in CERTIFY_P:
            out.append(("certify", f"expected one of {', '.join(CERTIFY_P)} or \"\", "
                                   f"got {self.certify!r}"))
        problem = box_problem(self.signature_box)
        if problem:
            out.append(("signature_box", problem))
        return out
