"""The throwaway PostgreSQL cluster of the tests: found on PATH or where Debian puts
it, and never silently absent under CI."""

from __future__ import annotations

import pytest

from tests import helpers_postgres, pgcluster


def test_binaries_are_found_in_debians_versioned_directories(tmp_path, monkeypatch):
    for version in ("9.6", "15", "13"):
        bin_dir = tmp_path / "postgresql" / version / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "initdb").write_text("")
    monkeypatch.setattr(pgcluster.shutil, "which", lambda name: None)
    debian = tmp_path / "postgresql"
    assert helpers_postgres.find_binary("initdb", debian) == debian / "15/bin/initdb"
    assert helpers_postgres.find_binary("pg_ctl", debian) is None


def test_without_postgres_tests_skip_but_fail_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no PostgreSQL here"):
        helpers_postgres.unavailable("initdb is missing")
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="required under CI"):
        helpers_postgres.unavailable("initdb is missing")


def test_the_cluster_serves_a_fresh_database_per_test(postgres_dsn):
    import psycopg

    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
