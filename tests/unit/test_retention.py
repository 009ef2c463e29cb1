"""The files of what a sweep or an erasure removed: one that cannot go is left, and
the others still go."""

from __future__ import annotations

from casesignd.engine.retention import remove_files
from casesignd.store.records import Removed


class Objects:
    def __init__(self) -> None:
        self.removed: list[str] = []

    def remove(self, tenant: str, case_id: str, sha256: str) -> int:
        if sha256 == "stuck":
            raise PermissionError(13, "Permission denied")
        self.removed.append(sha256)
        return 10


def test_a_file_that_cannot_be_removed_is_left_and_the_rest_go():
    objects = Objects()
    removed = [Removed("object", "t1", "C-1", key) for key in ("a", "stuck", "b")]
    assert remove_files(objects, None, removed) == 20  # type: ignore[arg-type]
    assert objects.removed == ["a", "b"]
