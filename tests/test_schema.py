"""Schema versions: migrations build what the code declares, older stores upgrade, others are refused clearly."""

import sqlite3

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text

from ortholab.cli.main import main
from ortholab.db import Store, StoreError
from ortholab.db.schema_version import alembic_config, head_revision


def _schema(url: str) -> dict:
    inspector = inspect(create_engine(url))
    return {
        table: (
            {(c["name"], c["nullable"]) for c in inspector.get_columns(table)},
            {(tuple(i["column_names"]), bool(i["unique"])) for i in inspector.get_indexes(table)},
        )
        for table in inspector.get_table_names()
    }


def _migrate(url: str, revision: str) -> None:
    with create_engine(url).begin() as conn:
        command.upgrade(alembic_config(conn), revision)


def test_migrations_build_the_declared_schema(tmp_path):
    declared, migrated = f"sqlite:///{tmp_path / 'declared.db'}", f"sqlite:///{tmp_path / 'migrated.db'}"
    Store(declared)
    _migrate(migrated, "head")
    assert _schema(declared) == _schema(migrated)
    Store(migrated)  # a migrated store is at head and opens


def test_an_older_store_is_upgraded_by_ortholab_db_upgrade_and_keeps_its_runs(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    _migrate(url, "0001")
    with create_engine(url).begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (name, status, stage, created_at, heartbeat_at, main_metric_mode, "
                "hostname, world_size, tags) VALUES ('old', 'finished', 'fit', '2026-01-01', "
                "'2026-01-01', 'min', 'h', 1, '[]')"
            )
        )
    with pytest.raises(StoreError, match=r"revision 0001 .* `ortholab db upgrade --db URL`"):
        Store(url)
    main(["db", "upgrade", "--db", url])
    assert f"0001 -> {head_revision()}" in capsys.readouterr().out
    (run,) = Store(url).list_runs()
    assert run.name == "old" and run.reason is None


def test_a_store_from_a_newer_ortholab_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    Store(url)
    with create_engine(url).begin() as conn:  # what a newer OrthoLab (9.1.0, revision 9999) leaves
        conn.execute(text("UPDATE ortholab_schema_version SET version_num = '9999'"))
        conn.execute(text("UPDATE store_info SET value = '9.1.0' WHERE key = 'written_by'"))
    with pytest.raises(
        StoreError, match=r"newer OrthoLab \(OrthoLab 9\.1\.0, schema revision 9999; .*upgrade OrthoLab"
    ):
        Store(url)


def test_a_database_of_something_else_is_not_touched(tmp_path):
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(StoreError, match=r"not an OrthoLab store \(it holds the tables \['invoices'\]\)"):
        Store(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["invoices"]


def test_a_refused_database_keeps_its_journal_mode(tmp_path):
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(StoreError, match="not an OrthoLab store"):
        Store(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:  # not switched to WAL (a setting the file keeps)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert not (tmp_path / "theirs.db-wal").exists()


def test_a_file_that_is_not_a_database_names_the_url(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database" * 100)
    with pytest.raises(StoreError, match=str(path)):
        Store(f"sqlite:///{path}")
