"""Decompression bombs that pass every per-stream limit: a one-page PDF whose page
reaches many Flate streams of zeros, each inflating to just under the policy's
``max_decoded_stream_bytes``, as many as fit in a kiosk document. Only a budget over
the whole document (decoded bytes, CPU time) stops one early."""

from __future__ import annotations

import zlib

from tests.helpers_corpus import assemble, stream

MiB = 1 << 20


def zeros_deflated(total_bytes: int, level: int = 9) -> bytes:
    """``total_bytes`` zeros, deflated (zlib), built a MiB at a time."""
    comp = zlib.compressobj(level)
    chunk = bytes(MiB)
    parts = [comp.compress(chunk) for _ in range(total_bytes // MiB)]
    parts.append(comp.compress(bytes(total_bytes % MiB)))
    parts.append(comp.flush())
    return b"".join(parts)


def many_stream_bomb(max_document_bytes: int, max_decoded_stream_bytes: int,
                     margin_bytes: int = 4096) -> tuple[bytes, int]:
    """(the PDF, how many streams) of at most ``max_document_bytes``: one page whose
    /Resources name that many form XObjects, each decoding to
    ``max_decoded_stream_bytes - margin_bytes`` zeros."""
    data = zeros_deflated(max_decoded_stream_bytes - margin_bytes)
    body = stream(data, b"/Type /XObject /Subtype /Form /BBox [0 0 1 1] /Filter /FlateDecode ")
    per_stream = len(body) + 64  # its object header, xref entry and resource name
    n = max(1, (max_document_bytes - 8192) // per_stream)
    names = b" ".join(b"/X%d %d 0 R" % (i, 6 + i) for i in range(n))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> /XObject << " + names + b" >> >> >>",
        stream(b"BT /F1 12 Tf 72 720 Td (an invoice, honest) Tj ET /X0 Do"),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ] + [body] * n
    pdf = assemble(objects)
    assert len(pdf) <= max_document_bytes, (len(pdf), max_document_bytes)
    return pdf, n
