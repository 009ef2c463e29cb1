"""Shared fixtures: a real daemon on loopback, made fresh for each test that asks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.daemon import Daemon, kill_all
from tests.helpers_postgres import postgres_cluster, postgres_dsn  # noqa: F401 - fixtures


@pytest.fixture
def daemon_factory(tmp_path) -> Iterator[Callable[..., Daemon]]:
    """Make (and afterwards stop) daemons: ``daemon_factory(overrides, start=True)``,
    and :class:`Daemon`'s own keywords (``sign_delay_ms``...)."""
    made: list[Daemon] = []

    def make(overrides: dict[str, Any] | None = None, *, start: bool = True,
             env: dict[str, str] | None = None, **daemon: Any) -> Daemon:
        d = Daemon(tmp_path / f"state{len(made)}", overrides, env, **daemon)
        made.append(d)
        return d.start() if start else d

    yield make
    kill_all(made)


@pytest.fixture
def daemon(daemon_factory) -> Daemon:
    return daemon_factory()
