"""Where pypdf's cross-reference and other readers' part ways, for the objects a
document reaches (PDF 32000-1 §7.5.4, §7.5.7, §7.5.8).

:func:`xref_findings` reads what pypdf's reader already parsed (its xref tables and
the object streams' headers) and returns :class:`~casesignd.pdf.frame.Finding`
values: an object freed by one section yet read from another, an object stream that
lists a number twice or holds another object at the index the xref names.
"""

from __future__ import annotations

from typing import Any

from pypdf import PdfReader
from pypdf.generic import IndirectObject, StreamObject

from casesignd.pdf.frame import AMBIGUITY, Finding
from casesignd.pdf.guard import MAX_WARNINGS


def _get(d: Any, key: str) -> Any:
    value = dict.get(d, key)
    return value.get_object() if isinstance(value, IndirectObject) else value


def xref_findings(reader: PdfReader, used: set[tuple[int, int]], *,
                   check_index: bool = True) -> list[Finding]:
    """Where pypdf's cross-reference and another reader's part ways, for the objects
    the document reaches: an object a section marks free that pypdf still takes from
    an older section (qpdf takes it as deleted), and an object stream whose header
    lists a number twice or holds another number at the index the xref names (pypdf
    takes the first entry of that number, poppler the one at the index, qpdf the
    last; PDF 32000-1 §7.5.7)."""
    found: list[Finding] = []
    freed = {num: gen for gen, entries in reader.xref_free_entry.items()
             for num, is_free in entries.items() if is_free and num}
    headers: dict[int, list[int] | None] = {}
    for num, gen in sorted(used):
        if num in freed and freed[num] >= gen:
            found.append(Finding(AMBIGUITY, f"object {num} is marked free by a cross-reference "
                                            "section, yet read from another", "xref_conflict",
                                 (("object", num),)))
        where = reader.xref_objStm.get(num)
        if where is None:
            continue
        stream_num, index = where
        if stream_num not in headers:
            headers[stream_num] = _objstm_numbers(reader, stream_num)
        numbers = headers[stream_num]
        if numbers is None:
            continue
        if len(set(numbers)) != len(numbers):
            found.append(Finding(AMBIGUITY, f"object stream {stream_num} lists an object "
                                            "number twice", "xref_conflict",
                                 (("object", stream_num),)))
        elif check_index and (not 0 <= index < len(numbers) or numbers[index] != num):
            found.append(Finding(AMBIGUITY, f"the cross-reference places object {num} at an "
                                            f"index of object stream {stream_num} that holds "
                                            "another", "xref_conflict", (("object", num),)))
        if len(found) >= MAX_WARNINGS:
            break
    return found


def _objstm_numbers(reader: PdfReader, stream_num: int) -> list[int] | None:
    """The object numbers an object stream's header lists, in order (§7.5.7)."""
    try:
        stm = reader.get_object(stream_num)
        if not isinstance(stm, StreamObject):
            return None
        first, count = int(_get(stm, "/First")), int(_get(stm, "/N"))
        head = stm.get_data()[:first].split()
        return [int(x) for x in head[0:2 * count:2]]
    except Exception:  # noqa: BLE001 - a header pypdf cannot read, pypdf has warned about
        return None
