"""A lazy view of bytes of a sealed file (:mod:`casesignd.core.sealed`): what a memory
map of a plain file gives a parser, read only when asked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol


class Positioned(Protocol):
    """What a view reads through: :class:`casesignd.core.sealed.SealedReader`."""

    def pread(self, size: int, offset: int) -> bytes: ...


class SealedView:
    """Bytes ``start:stop`` of a sealed file, read only when asked: what a memory map
    of a plain file gives a parser (a large stream's data, never in memory whole).
    ``len``, slicing (another view), ``bytes()`` and :meth:`chunks`."""

    __slots__ = ("_reader", "_start", "_stop")

    def __init__(self, reader: Positioned, start: int, stop: int) -> None:
        self._reader, self._start, self._stop = reader, start, max(start, stop)

    def __len__(self) -> int:
        return self._stop - self._start

    def __getitem__(self, item: slice) -> SealedView:
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("a sealed view is sliced, a step of 1")
        start, stop, _ = item.indices(len(self))
        return SealedView(self._reader, self._start + start, self._start + stop)

    def __bytes__(self) -> bytes:
        return self._reader.pread(len(self), self._start)

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        for at in range(self._start, self._stop, size):
            yield self._reader.pread(min(size, self._stop - at), at)
