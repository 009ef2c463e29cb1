"""The PostgreSQL store's SQL, read as data: what must hold of it without a server."""

from __future__ import annotations

import re

from casesignd.store.postgres_writer import STATE_CHANGES
from casesignd.store.sqlfiles import load_statements, migrations

STATEMENTS = (load_statements("sql/postgres/queries.sql") | load_statements("sql/postgres/lifecycle.sql")
              | load_statements("sql/postgres/claims.sql"))


def test_every_statement_that_sets_a_jobs_state_is_counted():
    # job_counts follows the states only through the statements STATE_CHANGES names.
    setting = set()
    for name, sql in STATEMENTS.items():
        if re.search(r"\bINSERT INTO jobs\b", sql):
            setting.add(name)
        for m in re.finditer(r"\bUPDATE jobs SET(.*?)(?:\bFROM\b|\bWHERE\b|\bRETURNING\b)", sql, re.S):
            if re.search(r"(?<![.\w])state\s*=", m.group(1)):
                setting.add(name)
    assert setting == set(STATE_CHANGES)


def test_migrations_are_numbered_from_one_without_gaps():
    versions = [v for v, _ in migrations("sql/postgres")]
    assert versions == list(range(1, len(versions) + 1))

