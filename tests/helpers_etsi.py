"""Validating casesignd's ETSI TS 119 102-2 reports against the schema, offline
(tests/data/etsi: the XSD as pyHanko's repository holds it)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from lxml import etree

XSD = Path(__file__).parent / "data" / "etsi" / "xsd"


class _Offline(etree.Resolver):
    """The one remote import (the XML namespace's attributes), from a local file."""

    def resolve(self, url, pubid, context):  # type: ignore[no-untyped-def]
        if url and url.startswith("http://www.w3.org/2001/xml.xsd"):
            return self.resolve_filename(str(XSD / "w3c" / "xml.xsd"), context)
        return None


@cache
def schema() -> etree.XMLSchema:
    parser = etree.XMLParser(no_network=True)
    parser.resolvers.add(_Offline())
    return etree.XMLSchema(etree.parse(str(XSD / "etsi" / "ts_11910202.xsd"), parser))


def assert_valid(xml: bytes) -> etree._Element:
    """The report's root; AssertionError naming the schema's complaints otherwise."""
    doc = etree.fromstring(xml)
    s = schema()
    assert s.validate(doc), "\n".join(str(e) for e in s.error_log)
    return doc
