"""Every document of the security probe (tests/helpers_probe.py) is refused with its
code: none is signed as received, and one a rewrite may repair is signed only as
that rewrite, drawn by poppler and MuPDF as the received document. A form that leaves
its look to viewers is signed only as the rewrite that draws it from the field's value."""

from __future__ import annotations

from pathlib import Path

import pytest

from casesignd.core.errors import CasesignError
from casesignd.pdf.inspect import PdfLimits
from casesignd.signing import pipeline
from tests.helpers_hostile import assert_drawn_alike
from tests.helpers_probe import DRAWN_BY_REWRITE, PROBES


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_is_refused(name: str, tmp_path: Path) -> None:
    build, codes = PROBES[name]
    data = build()
    limits = PdfLimits(max_decoded_stream_bytes=16 << 20)
    for mode in ("when_needed", "never", "always"):
        try:
            checked, source, reader = pipeline.check(data, PdfLimits(
                max_decoded_stream_bytes=limits.max_decoded_stream_bytes, normalize=mode))
            reader.stream.close()
        except CasesignError as e:
            assert e.code in codes, (name, mode, e.code, e.message)
            continue
        if name in DRAWN_BY_REWRITE and checked.normalized:
            shown, stale = DRAWN_BY_REWRITE[name]
            drawn = source if isinstance(source, bytes) else b""
            assert shown in drawn and stale not in drawn, (name, mode)
            continue
        if "normalized" in codes and checked.normalized:
            # Signed only as its rewrite, and only as the viewers showed what was received.
            received, rewrite = tmp_path / f"{mode}-received.pdf", tmp_path / f"{mode}-rewrite.pdf"
            received.write_bytes(data)
            assert isinstance(source, bytes)
            rewrite.write_bytes(source)
            assert_drawn_alike(received, rewrite)
            continue
        pytest.fail(f"{name} under {mode}: signed (normalized={checked.normalized}, "
                    f"reasons={checked.reasons})")
