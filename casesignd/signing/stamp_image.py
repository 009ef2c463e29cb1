"""The stamp's logo as an image XObject (PDF 32000-1 §8.9.5): a grey or RGB JPEG as it
is (DCTDecode), any other logo's pixels decoded and Flate-compressed, its transparency
as a soft mask (§11.6.5.3). Made once per logo and kept (:data:`CACHE_LOGOS`): a
tenant's logo is the same in every signature, and a signature only numbers it.

The logo is a PNG or JPEG that the invoices' branding checked when the configuration
was loaded (:func:`casesignd.invoices.branding.check_logo`): bounded in bytes and
pixels, and decodable.
"""

from __future__ import annotations

import functools
import io
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from casesignd.signing.stamp_fonts import stream

CACHE_LOGOS = 8  # each at most the branding's LOGO_MAX_BYTES, and its pixels once compressed


@dataclass(frozen=True)
class Image:
    """A logo as an image XObject's parts: its size in pixels, its dictionary's entries
    but /Length and /SMask, its encoded pixels, and its soft mask's body (empty:
    opaque)."""

    width: int
    height: int
    entries: str
    data: bytes
    mask: bytes


@functools.lru_cache(maxsize=CACHE_LOGOS)
def image(logo: bytes) -> Image:
    """``logo`` (PNG or JPEG bytes) as an image XObject's parts (deterministic)."""
    from PIL import Image as Pil

    with Pil.open(io.BytesIO(logo)) as img:
        width, height = img.size
        if img.format == "JPEG" and img.mode in ("L", "RGB"):
            space = "/DeviceGray" if img.mode == "L" else "/DeviceRGB"
            return Image(width, height, _entries(width, height, space) + " /Filter /DCTDecode",
                         logo, b"")
        img.load()
        has_alpha = img.mode in ("RGBA", "LA", "PA") or "transparency" in img.info
        pixels = img.convert("RGBA" if has_alpha else "RGB")
    mask = b""
    if has_alpha:
        alpha = pixels.getchannel("A")
        if alpha.getextrema() != (255, 255):
            mask = stream(alpha.tobytes(), head=_entries(width, height, "/DeviceGray"))
        pixels = pixels.convert("RGB")
    return Image(width, height, _entries(width, height, "/DeviceRGB") + " /Filter /FlateDecode",
                 zlib.compress(pixels.tobytes(), 6), mask)


def _entries(width: int, height: int, space: str) -> str:
    return (f" /Type /XObject /Subtype /Image /Width {width} /Height {height}"
            f" /ColorSpace {space} /BitsPerComponent 8")


def objects(img: Image, new_num: Callable[[], int]) -> tuple[int, list[tuple[int, bytes]]]:
    """The logo as PDF objects numbered by ``new_num``: (the image's number, [(number,
    body)])."""
    num = new_num()
    bodies: list[tuple[int, bytes]] = []
    mask = ""
    if img.mask:
        mask_num = new_num()
        mask = f" /SMask {mask_num} 0 R"
        bodies.append((mask_num, img.mask))
    body = f"<<{img.entries}{mask} /Length {len(img.data)}>>\nstream\n".encode()
    return num, [(num, body + img.data + b"\nendstream"), *bodies]
