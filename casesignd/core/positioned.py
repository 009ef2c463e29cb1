"""A readable, seekable raw file whose position is its own: what the sealed reader
(:mod:`casesignd.core.sealed`) and the views over a sealed file share."""

from __future__ import annotations

import io
import os


def seek_target(current: int, size: int, offset: int, whence: int) -> int:
    """Where ``seek(offset, whence)`` goes in a file of ``size`` bytes read at
    ``current`` (pure); a negative target is an OSError, as for a file."""
    base = {os.SEEK_SET: 0, os.SEEK_CUR: current, os.SEEK_END: size}.get(whence)
    if base is None:
        raise ValueError(f"invalid whence {whence}")
    if base + offset < 0:
        raise OSError(22, "negative seek position")
    return base + offset


class PositionedReader(io.RawIOBase):
    """A readable, seekable raw file whose position is its own (``_pos``) over
    ``_size()`` bytes: what the sealed reader and views over it share."""

    _pos = 0

    def _size(self) -> int:
        raise NotImplementedError

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._pos = seek_target(self._pos, self._size(), offset, whence)
        return self._pos
