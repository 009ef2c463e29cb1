"""What an incremental update needs of the document it follows (PDF 32000-1 §7.5.6):
its last cross-reference section, its trailer and catalog, its first page, the names
and fields already there, the signatures it carries and the DocMDP level they set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from pypdf import PdfReader
from pypdf import generic as g

from casesignd.core.errors import EncryptedPdf, MalformedPdf
from casesignd.pdf import parse as pdfparse
from casesignd.pdf.form import Form, read_form
from casesignd.pdf.inspect import docmdp_permission
from casesignd.pdf.syntax import raw, resolved

_STARTXREF = re.compile(rb"startxref\s+(\d+)")
_OBJ_HEADER = re.compile(rb"\d+\s+\d+\s+obj\b")


@dataclass
class Structure:
    reader: PdfReader
    startxref: int
    xref_is_stream: bool
    size: int
    root_ref: g.IndirectObject
    catalog: g.DictionaryObject
    page_ref: g.IndirectObject
    page: g.DictionaryObject
    trailer: g.DictionaryObject
    ends_with_eol: bool = True
    # P of a certification signature, or of a signed field's /Lock, the strictest
    docmdp: int | None = None
    form: Form = Form()

    @property
    def signed(self) -> bool:
        """Whether the document carries a signature already (certifying or not)."""
        return bool(self.form.signed) or self.docmdp is not None


def last_startxref(f: IO[bytes]) -> int:
    f.seek(0, os.SEEK_END)
    end = f.tell()
    f.seek(max(0, end - 2048))
    tail = f.read()
    found = list(_STARTXREF.finditer(tail))
    if not found:
        raise MalformedPdf("no startxref at the end of the file")
    return int(found[-1].group(1))


def first_page(catalog: g.DictionaryObject) -> tuple[g.IndirectObject, g.DictionaryObject]:
    ref = raw(catalog, "/Pages")
    for _ in range(64):  # the page tree is shallow; a cycle is malformed
        if not isinstance(ref, g.IndirectObject):
            raise MalformedPdf("page tree node is not an indirect object")
        node = ref.get_object()
        if not isinstance(node, g.DictionaryObject):
            raise MalformedPdf("page tree node is not a dictionary")
        if resolved(node, "/Type") == "/Page" or "/Kids" not in node:
            return ref, node
        kids = node["/Kids"]
        if not isinstance(kids, g.ArrayObject) or not kids:
            raise MalformedPdf("the document has no pages")
        ref = kids[0]
    raise MalformedPdf("page tree too deep or cyclic")


def read_structure(f: IO[bytes], reader: PdfReader | None = None) -> Structure:
    startxref = last_startxref(f)
    f.seek(startxref)
    head = f.read(32).lstrip()
    if not (head.startswith(b"xref") or _OBJ_HEADER.match(head)):
        # pypdf would repair this, but our /Prev must name a real section (§7.5.6).
        raise MalformedPdf("startxref does not point to a cross-reference section")
    reader = reader or pdfparse.reader(f)
    if reader.is_encrypted:
        raise EncryptedPdf("the PDF is encrypted")
    trailer = reader.trailer
    root_ref = raw(trailer, "/Root")
    if not isinstance(root_ref, g.IndirectObject):
        raise MalformedPdf("trailer has no indirect /Root")
    catalog = root_ref.get_object()
    if not isinstance(catalog, g.DictionaryObject):
        raise MalformedPdf("the /Root is not a dictionary")
    page_ref, page = first_page(catalog)
    size = int(resolved(trailer, "/Size", 0))
    size = max([size, *(n + 1 for gen in reader.xref.values() for n in gen)], default=size)
    size = max([size, *(n + 1 for n in reader.xref_objStm)], default=size)
    f.seek(-1, os.SEEK_END)
    last = f.read(1)
    form = read_form(catalog)
    levels = [p for p in (docmdp_permission(catalog), form.lock_p) if p is not None]
    return Structure(
        reader=reader,
        startxref=startxref,
        xref_is_stream=not head.startswith(b"xref"),
        size=size,
        root_ref=root_ref,
        catalog=catalog,
        page_ref=page_ref,
        page=page,
        trailer=trailer,
        ends_with_eol=last in (b"\n", b"\r"),
        docmdp=min(levels, default=None),
        form=form,
    )


def name_tree_items(node: Any, depth: int = 0) -> Iterator[tuple[Any, Any]]:
    if depth > 32:
        raise MalformedPdf("name tree too deep or cyclic")
    node = node.get_object()
    if not isinstance(node, g.DictionaryObject):
        return
    names = resolved(node, "/Names")
    if names is not None:
        names = names.get_object()
        for i in range(0, len(names) - 1, 2):
            yield names[i], names[i + 1]
    for kid in resolved(node, "/Kids", []) or []:
        yield from name_tree_items(kid, depth + 1)


def field_names(fields: Any) -> set[str]:
    out: set[str] = set()
    for ref in fields or []:
        obj = ref.get_object()
        if isinstance(obj, g.DictionaryObject) and "/T" in obj:
            out.add(str(obj["/T"]))
    return out
