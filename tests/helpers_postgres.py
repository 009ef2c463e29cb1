"""A throwaway PostgreSQL cluster: the ``postgres_cluster`` session fixture starts one
(``initdb`` in a temp directory, the server on a Unix socket only, as the ``postgres``
user when the tests run as root) and stops it at the end; ``postgres_dsn`` is a fresh
database for one test. Both are imported into tests/conftest.py. The cluster itself
is tests/pgcluster.py, which the benchmarks use too.

Without PostgreSQL the tests that ask for it skip, saying why; with ``CI`` set in the
environment they fail instead, so CI cannot pass without them. ``scripts/setup
--system`` installs Debian's ``postgresql``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.pgcluster import (  # noqa: F401 - the cluster's names, as before
    DEBIAN_DIR,
    OS_USER,
    USER,
    Cluster,
    find_binary,
    missing,
    running_cluster,
)


def unavailable(reason: str) -> None:
    """Skip (a developer's machine), or fail under CI, where it must not pass unseen."""
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL is required under CI: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL here ({reason}); scripts/setup --system installs it")


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    """Session fixture: a running throwaway cluster (skips, or fails under CI, without one)."""
    reason = missing()
    if reason is not None:
        unavailable(reason)
    # Under /tmp, not pytest's own tmp_path: that is 0700 root, which postgres cannot reach.
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def postgres_dsn(postgres_cluster: Cluster) -> Iterator[str]:
    """A fresh database on the session's cluster, dropped after the test."""
    with postgres_cluster.fresh_database() as dsn:
        yield dsn
