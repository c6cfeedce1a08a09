"""The store, the logger, `ortholab runs` and a CLI fit against a real PostgreSQL server."""

import json
import math
import subprocess
import sys

import pytest
from postgres import postgres_server, unavailable_reason, wait_until_ready
from test_cli import DEMO, TINY

from ortholab.db import Store

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@pytest.fixture(scope="module")
def pg_url():
    with postgres_server() as url:
        wait_until_ready(url)
        yield url


def test_store_round_trip_on_postgres(pg_url):
    store = Store(pg_url)
    run_id = store.create_run(
        name="pg",
        family="scornn",
        task="copying",
        main_metric="val/loss",
        baseline=0.17,
        config={"model": {"hidden_size": 8}},
    )
    store.log_metrics(run_id, {"val/loss": 0.5, "train/loss": float("nan")}, step=0, epoch=0)
    store.log_metrics(run_id, {"val/loss": 0.2}, step=1, epoch=0)
    store.log_metrics(run_id, {"val/loss": 0.3}, step=2, epoch=1)
    store.log_params(run_id, {"model": {"hidden_size": 8}})
    store.log_params(run_id, {"model": {"hidden_size": 16}})  # upsert
    art = store.add_artifact(run_id, "audio", "clip", step=2, data=b"RIFF\x00\x01", meta={"role": "reference"})
    store.set_status(run_id, "failed", reason="because")
    run = next(r for r in store.list_runs() if r.id == run_id)
    assert (run.best, run.last, run.steps, run.status, run.reason) == (0.2, 0.3, 2, "failed", "because")
    assert math.isnan(store.metric_series(run_id, "train/loss")[0].value)
    detail = store.get_run(run_id)
    assert detail.params["model.hidden_size"] == 16 and detail.config == {"model": {"hidden_size": 8}}
    assert store.artifact_data(art) == b"RIFF\x00\x01" and store.artifacts(run_id)[0].meta == {"role": "reference"}


def test_cli_fit_and_runs_on_postgres(pg_url, tmp_path, monkeypatch):
    from ortholab.cli.main import main

    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", DEMO, *TINY, "--db", pg_url, "--name", "on-postgres"])
    listed = subprocess.run(
        [sys.executable, "-c", "from ortholab.cli.main import main; main()", "runs", "--json", "--db", pg_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout) if r["name"] == "on-postgres")
    assert row["status"] == "finished" and row["steps"] == 6 and row["best"] is not None
    store = Store(pg_url)
    assert [p.step for p in store.metric_series(row["id"], "train/loss")] == list(range(6))
    assert store.artifacts(row["id"], "eigenvalues")


def test_unreachable_postgres_is_one_clear_message(capsys):
    from ortholab.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "--db", "postgresql+psycopg://nobody@127.0.0.1:1/none"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "postgresql+psycopg://nobody@127.0.0.1:1/none" in err and "--db" in err


def test_dashboard_pages_render_from_postgres(pg_url, monkeypatch):
    from dashboard_store import add_hand_written_runs
    from test_dashboard_app import PAGES, charts, open_page

    from ortholab.app.data import clear_caches

    store = Store(pg_url)
    ids = add_hand_written_runs(store)
    clear_caches()
    try:
        table = open_page(store, monkeypatch, "runs").dataframe[0].value
        assert set(ids) <= set(table["name"])
        curves = open_page(store, monkeypatch, "curves", selected=[ids["lstm-adding"]])
        assert charts(curves)  # plotly figures built from PostgreSQL's metric points
        for page in PAGES:
            open_page(store, monkeypatch, page["name"], selected=list(ids.values()))  # no exception on any page
    finally:
        clear_caches()


def test_the_password_is_stored_nowhere_and_resume_uses_the_real_url(pg_url, tmp_path, monkeypatch, capsys):
    """A password in ORTHOLAB_DB never reaches the stored config; `--resume ID` then still opens the real store."""
    from pathlib import Path

    from ortholab.cli.main import main
    from ortholab.cli.train import resume_arguments as _resume_arguments

    url = pg_url.replace("ortholab@", "ortholab:s3cret@")  # the test server trusts any password
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORTHOLAB_DB", url)
    main(["fit", "--config", DEMO, *TINY, "--name", "with-password"])
    store = Store(url)
    run = next(r for r in store.list_runs() if r.name == "with-password")
    detail = store.get_run(run.id)
    stored = Path(detail.run_dir, "config.yaml").read_text()
    assert "s3cret" not in stored and "\ndb: null\n" in stored  # the URL came from the environment: not stored
    assert "s3cret" not in json.dumps(detail.config) and not any("s3cret" in str(v) for v in detail.params.values())
    argv = _resume_arguments(["fit", "--resume", str(run.id), "--trainer.max_steps", "12"])  # finished: go further
    assert argv[argv.index("--db") + 1] == url  # placed after the stored config, whose URL is masked
    capsys.readouterr()
    monkeypatch.delenv("ORTHOLAB_DB")  # the store is no longer the default one
    main(["fit", "--config", DEMO, *TINY, "--db", url, "--name", "with-password-flag"])  # given on the command line
    said = capsys.readouterr().out  # a command to copy cannot hold ***: it names URL, the one given
    assert "s3cret" not in said, said
    assert "runs --db URL` (URL: the one given, password and all)." in said, said
    flagged = next(r for r in store.list_runs() if r.name == "with-password-flag")
    stored = Path(store.get_run(flagged.id).run_dir, "config.yaml").read_text()
    assert "s3cret" not in stored and "ortholab:***@127.0.0.1" in stored  # masked
    argv = _resume_arguments(["fit", "--resume", str(flagged.id), "--db", url, "--trainer.max_steps", "12"])
    assert argv[argv.index("--db") + 1] == url


def test_a_role_with_select_only_reads_and_is_refused_writing_in_one_line(pg_url, capsys):
    """store.md: the readers need no more than SELECT on PostgreSQL (a dashboard's or a viewer's role)."""
    from sqlalchemy import create_engine, text

    from ortholab.cli.main import main

    run = Store(pg_url).create_run(name="seen-by-viewer", family="scornn", task="copying", main_metric="val/loss")
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE ROLE viewer LOGIN"))
        conn.execute(text("GRANT SELECT ON ALL TABLES IN SCHEMA public TO viewer"))
    engine.dispose()
    viewer = pg_url.replace("ortholab@", "viewer@")
    for command in (["runs"], ["runs", "show", str(run)], ["db", "version"], ["report", "scornn_table1"]):
        capsys.readouterr()
        main([*command, "--db", viewer])
        out, err = capsys.readouterr()
        assert "error" not in err, (command, err)
    assert "seen-by-viewer" in Store(viewer, access="read").get_run(run).name
    for command in (["runs", "tag", str(run), "x"], ["db", "upgrade"]):
        with pytest.raises(SystemExit) as refused:
            main([*command, "--db", viewer])
        err = capsys.readouterr().err
        assert refused.value.code == 2 and len(err.strip().splitlines()) == 1, err
        assert "viewer@127.0.0.1" in err and "permission denied" in err


def test_a_role_that_needs_a_password_is_told_how_to_give_it(pg_url, capsys, monkeypatch):
    """A team server asks each user for a password: libpq's "fe_sendauth: no password supplied" alone left the user
    guessing; the line names PGPASSWORD, ~/.pgpass and the URL's form. A wrong password is said to be refused."""
    from pathlib import Path

    from sqlalchemy import create_engine, text

    from ortholab.cli.main import main

    Store(pg_url)  # the tables, for the reader below
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE ROLE guarded LOGIN PASSWORD 'right-one'"))
        conn.execute(text("GRANT SELECT ON ALL TABLES IN SCHEMA public TO guarded"))
        hba = Path(conn.execute(text("SHOW hba_file")).scalar())
        hba.write_text("host all guarded 127.0.0.1/32 scram-sha-256\n" + hba.read_text())  # first match wins
        conn.execute(text("SELECT pg_reload_conf()"))
    engine.dispose()
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")  # a ~/.pgpass of the machine's user must not answer for it
    guarded = pg_url.replace("ortholab@", "guarded@")
    for url, said in [(guarded, "asks this user for a password"), (guarded.replace("@", ":wrong@"), "refused")]:
        with pytest.raises(SystemExit) as refused:
            main(["runs", "--db", url])
        err = capsys.readouterr().err
        assert refused.value.code == 2 and len(err.strip().splitlines()) == 1, err
        assert said in err and "PGPASSWORD" in err and "~/.pgpass" in err and "wrong" not in err, err
    monkeypatch.setenv("PGPASSWORD", "right-one")
    main(["runs", "--db", guarded])  # the way the line names works
    assert "error" not in capsys.readouterr().err


def test_a_reader_is_read_only_at_the_server_and_still_reads(pg_url):
    """store.md: readers never change a store. On PostgreSQL the server itself refuses a write through a reader's
    engine (each of its transactions is READ ONLY), whatever its role may do; what readers do still works."""
    import psycopg
    from sqlalchemy import insert, select
    from sqlalchemy.exc import DBAPIError

    from ortholab.db import StoreError
    from ortholab.db.schema import Run

    writer = Store(pg_url)
    run = writer.create_run(name="read-by-a-reader", family="scornn", task="copying", main_metric="val/loss")
    writer.log_metrics(run, {"val/loss": 0.4}, step=0, epoch=0)
    writer.log_metrics(run, {"val/loss": 0.3}, step=1, epoch=0)
    reader = Store(pg_url, access="read")  # the role may write (it made the tables): only the reader's engine stops it
    with pytest.raises(DBAPIError) as refused, reader._engine.connect() as conn:
        conn.execute(insert(Run).values(name="written-by-a-reader", hostname=""))
        conn.commit()
    assert isinstance(refused.value.orig, psycopg.errors.ReadOnlySqlTransaction), refused.value
    assert "cannot execute INSERT in a read-only transaction" in str(refused.value)
    with pytest.raises(StoreError, match="cannot execute UPDATE in a read-only transaction"):
        reader.set_tags(run, add=["by-a-reader"])
    with writer._engine.connect() as conn:
        assert "written-by-a-reader" not in conn.execute(select(Run.name)).scalars().all()
    assert writer.get_run(run).tags == ()
    # what readers do: list the runs, read a run and its metric series, the store's facts
    assert "read-by-a-reader" in [r.name for r in reader.list_runs()]
    assert [(p.step, p.value) for p in reader.metric_series(run, "val/loss")] == [(0, 0.4), (1, 0.3)]
    assert reader.get_run(run).best == 0.3 and reader.metric_keys(run) == ["val/loss"]
    assert reader.store_id == writer.store_id and reader.frozen_at is None
    writer.set_tags(run, add=["by-the-writer"])  # a writer beside it still writes, and the reader sees it at once
    assert reader.get_run(run).tags == ("by-the-writer",)
    reader.close()
