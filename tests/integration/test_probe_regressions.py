"""Every document of the security probe (tests/helpers_probe.py) is refused with its
code: none is signed as received."""

from __future__ import annotations

import pytest

from casesignd import pipeline
from casesignd.errors import CasesignError
from casesignd.pdfcheck import PdfLimits
from tests.helpers_probe import PROBES


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_is_refused(name: str) -> None:
    build, codes = PROBES[name]
    data = build()
    limits = PdfLimits(max_decoded_stream_bytes=16 << 20)
    for mode in ("when_needed", "never", "always"):
        try:
            checked, _source, reader = pipeline.check(data, PdfLimits(
                max_decoded_stream_bytes=limits.max_decoded_stream_bytes, normalize=mode))
            reader.stream.close()
        except CasesignError as e:
            assert e.code in codes, (name, mode, e.code, e.message)
            continue
        pytest.fail(f"{name} under {mode}: signed (normalized={checked.normalized}, "
                    f"reasons={checked.reasons})")
