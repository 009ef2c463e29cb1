"""Every document of the security probe (tests/helpers_probe.py) is refused with its
code: none is signed as received. A form that leaves its look to viewers is signed only
as the rewrite that draws it from the field's value."""

from __future__ import annotations

import pytest

from casesignd import pipeline
from casesignd.errors import CasesignError
from casesignd.pdfcheck import PdfLimits
from tests.helpers_probe import DRAWN_BY_REWRITE, PROBES


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_is_refused(name: str) -> None:
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
        pytest.fail(f"{name} under {mode}: signed (normalized={checked.normalized}, "
                    f"reasons={checked.reasons})")
