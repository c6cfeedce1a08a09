"""The store under hostile use, on SQLite and on a real PostgreSQL server: one point per (run, key, step), a run
written by one live process at a time (a lease, recovered after a crash), old stores de-duplicated by `db upgrade`,
foreign and newer databases refused in one line, readers that never create a store and read a read-only one."""

import dataclasses
import gc
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from alembic import command
from postgres import postgres_server, unavailable_reason, wait_until_ready
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from ortholab.cli.main import main
from ortholab.db import Store, StoreError, frames
from ortholab.db.lease import LEASE_S, current_owner
from ortholab.db.schema_version import alembic_config, head_revision
from ortholab.db.store import LeaseLost, RunBusy

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pg_server():
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with postgres_server() as url:
        wait_until_ready(url)
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    """A fresh, empty database: a SQLite file, or a new database on the test PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    server = request.getfixturevalue("pg_server")
    name = f"t{uuid.uuid4().hex[:12]}"
    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return f"{server.rsplit('/', 1)[0]}/{name}"


def cli(capsys, *args):
    """`ortholab ARGS` that must fail: (exit code, stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code, capsys.readouterr().err


def one_line_error(code, err) -> str:
    assert code == 2 and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert line.startswith("ortholab: error: ")
    return line


def raw(url, sql, **params):
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(sql), params)
            return result.fetchall() if result.returns_rows else None
    finally:
        engine.dispose()


# one point per (run, key, step) -----------------------------------------------------------------------------
def test_a_step_logged_again_rewrites_its_point_and_a_duplicate_is_impossible(url):
    store = Store(url)
    run = store.create_run(name="r", main_metric="val/loss")
    store.log_metrics(run, {"val/loss": 2.0, "time/step_s": 0.5}, step=3, epoch=0)
    store.log_metrics(run, {"val/loss": 1.0}, step=3, epoch=1)  # the step re-run after a resume
    assert [(p.step, p.epoch, p.value) for p in store.metric_series(run, "val/loss")] == [(3, 1, 1.0)]
    assert [p.value for p in store.metric_series(run, "time/step_s")] == [0.5]
    with pytest.raises(IntegrityError):  # the database itself refuses a second point, whoever writes it
        raw(
            url,
            "INSERT INTO metrics (run_id, key, step, value, wall_time) VALUES (:run, 'val/loss', 3, 5.0, 0)",
            run=run,
        )


def test_an_artifact_recorded_again_at_its_step_replaces_the_old_one(url):
    store = Store(url)
    run = store.create_run(name="r")
    store.add_artifact(run, "eigenvalues", "W", step=6, data=b"old")
    newer = store.add_artifact(run, "eigenvalues", "W", step=6, data=b"new")
    store.add_artifact(run, "eigenvalues", "W", step=9, data=b"later")
    assert [(a.id, a.step) for a in store.artifacts(run) if a.step == 6] == [(newer, 6)]
    assert store.artifact_data(newer) == b"new" and len(store.artifacts(run)) == 2


def test_bulk_reads_agree_with_the_per_run_reads(url):
    store = Store(url)
    run = store.create_run(name="r", main_metric="m")
    store.log_params(run, {"model": {"hidden_size": 8}})
    for step, value in [(3, 2.0), (1, float("nan")), (2, 1.0)]:
        store.log_metrics(run, {"m": value}, step=step, epoch=step // 2)
    columns = store.metric_columns(run, "m")
    series = store.metric_series(run, "m")
    assert columns["step"].tolist() == [p.step for p in series] == [1, 2, 3]
    assert columns["epoch"].tolist() == [p.epoch for p in series]
    assert str(columns["value"].tolist()) == str([p.value for p in series])  # NaN where NaN was logged
    assert store.last_values([run], ["m"]) == {(run, "m"): 2.0}
    assert store.params_of([run]) == {run: {"model.hidden_size": 8}} and store.metric_keys_of([run]) == {run: ["m"]}


# leases ------------------------------------------------------------------------------------------------------
HOLDER = """
import sys, time
from ortholab.db import Store
from ortholab.db.lease import current_owner
store = Store(sys.argv[1])
run = store.create_run(name="live", owner=current_owner().token)
print(run, flush=True)
while True:  # a training process's heartbeat, faster
    time.sleep(1)
    store.renew(run)
"""


def start_holder(url):
    """A process that records a run under its lease and stays alive: (process, run id)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE, text=True)
    return holder, int(holder.stdout.readline())


def kill(process):
    process.send_signal(signal.SIGKILL)
    process.wait()  # reaped, as a shell or a scheduler reaps its children


def test_a_live_writer_keeps_its_run_and_a_crashed_one_gives_it_up_at_once(url):
    holder, run = start_holder(url)
    try:
        store = Store(url)
        with pytest.raises(RunBusy, match=f"still being written by process {holder.pid} on "):
            store.acquire_run(run, "someone|else|ns|1|1")
        assert f"process {holder.pid}" in store.lease_holder(run)
    finally:
        kill(holder)
    assert store.lease_holder(run) is None  # its process is gone on this machine: no need to wait for the lease
    store.acquire_run(run, "someone|else|ns|1|1")
    store.log_metrics(run, {"m": 1.0}, step=0)


def test_a_lease_from_another_machine_holds_until_it_expires(url):
    store = Store(url)
    run = store.create_run(name="remote", owner="elsewhere|boot|pid:[1]|4242|99")
    with pytest.raises(RunBusy, match="process 4242 on elsewhere"):
        store.acquire_run(run, current_owner().token)
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    raw(url, "UPDATE runs SET lease_expires_at = :t WHERE id = :run", t=past, run=run)  # its heartbeats stopped
    store.acquire_run(run, current_owner().token)  # a crash on another machine: taken over once expired
    assert store.lease_holder(run) is not None  # now ours


def test_a_rows_claim_is_held_by_one_command_and_taken_over_once_its_holder_is_gone_or_expired(url):
    """`reproduce` claims a row and seed before it reads the store for it (ortholab/cli/row_claims.py): a second
    command finds the claim, not a run its first command's fit has not recorded yet."""
    store, key = Store(url), "paper:t/r seed:1 scale:full flags:"
    remote, mine = "elsewhere|boot|pid:[1]|4242|99", current_owner().token
    assert store.claim(key, remote, 60) is None and store.claim(key, remote, 60) is None  # taken, then renewed
    assert store.claim(key, mine) == "process 4242 on elsewhere"
    assert store.claim(key.replace("seed:1", "seed:2"), mine) is None  # another seed: another claim
    store.release_claim(key, mine)  # not its claim: left alone
    assert store.claim(key, mine) == "process 4242 on elsewhere"
    assert store.claim(key, remote, -1) is None  # its holder's last renewal has run out
    assert store.claim(key, mine) is None  # expired: taken over
    store.release_claim(key, mine)
    assert store.claim(key, remote) is None  # released: free for the next
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    dead = dataclasses.replace(current_owner(), pid=ended.pid, started="1").token  # ended here on this machine
    assert store.claim(key.replace("seed:1", "seed:3"), dead, 3600) is None
    assert store.claim(key.replace("seed:1", "seed:3"), mine) is None  # taken over at once, not after an hour
    assert len(store.store_id) == 32  # the store's own facts beside the claims


def test_a_writer_that_lost_its_lease_writes_nothing_more(url):
    first, second = Store(url), Store(url)
    run = first.create_run(name="r", owner="first|b|n|1|1")
    first.log_metrics(run, {"m": 1.0}, step=0)
    raw(
        url,
        "UPDATE runs SET lease_expires_at = :t WHERE id = :run",  # first stalled past its lease
        t=datetime.now(timezone.utc) - timedelta(seconds=LEASE_S),
        run=run,
    )
    second.acquire_run(run, "second|b|n|2|2")
    with pytest.raises(LeaseLost, match=f"Run {run} .* taken over by process 2 on second"):
        first.log_metrics(run, {"m": 9.0}, step=1)
    second.log_metrics(run, {"m": 2.0}, step=1)
    assert [(p.step, p.value) for p in second.metric_series(run, "m")] == [(0, 1.0), (1, 2.0)]


def test_resuming_a_run_whose_process_is_alive_is_refused_in_one_line(url, capsys):
    holder, run = start_holder(url)
    try:
        owner = "SELECT status, reason, lease_owner FROM runs WHERE id = :run"
        before = raw(url, owner, run=run)
        code, err = cli(capsys, "fit", "--resume", str(run), "--db", url)
        line = one_line_error(code, err)
        assert f"Run {run} " in line and f"still being written by process {holder.pid}" in line
        assert raw(url, owner, run=run) == before  # still the holder's, untouched
    finally:
        kill(holder)


# db upgrade --------------------------------------------------------------------------------------------------
def migrate(url, revision):
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), revision)
    engine.dispose()


def test_upgrade_removes_duplicate_points_keeping_the_last_logged_and_forbids_them(url, capsys):
    migrate(url, "0002")  # a store written before points were unique
    raw(
        url,
        "INSERT INTO runs (name, status, stage, created_at, heartbeat_at, main_metric_mode, hostname, "
        "world_size, tags) VALUES ('old', 'finished', 'fit', '2026-01-01', '2026-01-01', 'min', 'h', 1, '[]')",
    )
    for step, value in [(0, 3.0), (1, 2.0), (1, 1.5), (2, 1.0), (1, 1.25), (2, 0.5)]:  # in the order logged
        raw(
            url,
            "INSERT INTO metrics (run_id, key, step, value, wall_time) VALUES (1, 'val/loss', :s, :v, 0)",
            s=step,
            v=value,
        )
    main(["db", "upgrade", "--db", url])
    assert f"0002 -> {head_revision()}; 3 duplicate metric point(s) removed" in capsys.readouterr().out
    store = Store(url)
    assert [(p.step, p.value) for p in store.metric_series(1, "val/loss")] == [(0, 3.0), (1, 1.25), (2, 0.5)]
    with pytest.raises(IntegrityError):
        raw(url, "INSERT INTO metrics (run_id, key, step, value, wall_time) VALUES (1, 'val/loss', 2, 7.0, 0)")
    assert len(store.store_id) == 32 and store.written_by


def test_upgrade_refuses_a_database_of_other_tables_unless_told(url, capsys):
    raw(url, "CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    line = one_line_error(*cli(capsys, "db", "upgrade", "--db", url))
    assert "not an OrthoLab store (it holds the tables ['invoices'])" in line and "--allow-foreign" in line
    line = one_line_error(*cli(capsys, "runs", "--db", url))  # any other command names the way too
    assert "not an OrthoLab store" in line and "`ortholab db upgrade --allow-foreign --db URL`" in line
    assert inspect(create_engine(url)).get_table_names() == ["invoices"]  # untouched
    main(["db", "upgrade", "--allow-foreign", "--db", url])
    assert {"runs", "metrics", "invoices"} <= set(inspect(create_engine(url)).get_table_names())
    Store(url)  # now a store at head


def test_upgrade_of_a_store_from_a_newer_ortholab_names_its_version_in_one_line(url, capsys):
    Store(url)
    raw(url, "UPDATE ortholab_schema_version SET version_num = '0099'")
    raw(url, "UPDATE store_info SET value = '7.3.0' WHERE key = 'written_by'")
    code, err = cli(capsys, "db", "upgrade", "--db", url)
    line = one_line_error(code, err)
    assert "written by a newer OrthoLab (OrthoLab 7.3.0, schema revision 0099" in line and "upgrade OrthoLab" in line


# readers -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [["runs"], ["runs", "--json"], ["db", "version"], ["report", "--export", "out"], ["dashboard", "--port", "1"]],
)
def test_a_reader_on_a_mistyped_path_says_it_does_not_exist_and_creates_nothing(tmp_path, monkeypatch, capsys, command):
    import ortholab.app.launch as launch

    monkeypatch.setattr(launch.os, "execve", lambda *a: pytest.fail("the dashboard started on a missing store"))
    monkeypatch.chdir(tmp_path)
    typo = tmp_path / "rnus" / "ortholab.db"
    line = one_line_error(*cli(capsys, *command, "--db", f"sqlite:///{typo}"))
    assert "does not exist" in line and str(typo) in line
    assert list(tmp_path.iterdir()) == []  # no folder, no file


def test_readers_leave_every_byte_of_a_copy_with_a_killed_writers_wal_as_it_was(tmp_path):
    """A byte copy of a store whose writer died (its -wal not yet folded into the file): readers see the WAL's runs
    and leave the file and its WAL as they were, also as root, for whom a writable file once meant a read-write
    connection that folded the WAL into the file and removed the side files as it closed."""
    live = tmp_path / "live" / "ortholab.db"
    writer = Store(f"sqlite:///{live}", access="create")
    run = writer.create_run(name="in-the-wal", family="scornn", task="copying")
    writer.log_metrics(run, {"val/loss": 0.5}, step=3)
    copy = tmp_path / "copy"
    copy.mkdir()
    for suffix in ("", "-wal", "-shm"):  # as a killed writer leaves them: the WAL holds the run
        shutil.copy2(f"{live}{suffix}", copy / f"ortholab.db{suffix}")
    assert (copy / "ortholab.db-wal").stat().st_size > 0
    kept = ("ortholab.db", "ortholab.db-wal")  # -shm is SQLite's shared-memory index, which every WAL reader marks
    before = {name: ((copy / name).read_bytes(), (copy / name).stat().st_mtime_ns) for name in kept}
    url = f"sqlite:///{copy / 'ortholab.db'}"
    said = {}
    for reader in ("runs", "report"):  # each in a process of its own, whose end closes its connection
        said[reader] = subprocess.run(
            [sys.executable, "-c", "from ortholab.cli.main import main; main()", reader, "--db", url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert said[reader].returncode == 0, said[reader].stderr
    assert "in-the-wal" in said["runs"].stdout
    assert [r.name for r in Store(url, access="read").list_runs()] == ["in-the-wal"]
    assert {name: ((copy / name).read_bytes(), (copy / name).stat().st_mtime_ns) for name in kept} == before
    assert sorted(p.name for p in copy.iterdir()) == ["ortholab.db", "ortholab.db-shm", "ortholab.db-wal"]


def test_a_reader_opened_before_any_writer_sees_the_runs_a_later_writer_records(tmp_path):
    """The dashboard keeps one Store open: opened on a store no writer had open (read as it was, immutable), it
    must still see a fit that starts later, in another process."""
    url = f"sqlite:///{tmp_path / 'ortholab.db'}"
    code = "import sys; from ortholab.db import Store; Store(sys.argv[1]).create_run(name=sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, url, "first"], check=True, timeout=120)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ortholab.db"]  # no writer has it open
    reader = Store(url, access="read")
    assert [r.name for r in reader.list_runs()] == ["first"]
    subprocess.run([sys.executable, "-c", code, url, "second"], check=True, timeout=120)
    assert sorted(r.name for r in reader.list_runs()) == ["first", "second"]


@pytest.mark.parametrize(
    "command,listed,said",
    [  # a line a table (its name padded), its rows counted
        (["reproduce", "--list"], "scornn_table1     ", "Every table's rows are counted as not run."),
        (["reproduce", "scornn_table1", "--list"], "not yet run", "Every row is listed as not yet run."),
        (["report", "--all"], "not yet run", "Every row is listed as not yet run."),
    ],
)
def test_the_papers_rows_are_listed_before_any_store_exists_without_making_one(
    tmp_path, monkeypatch, capsys, command, listed, said
):
    monkeypatch.chdir(tmp_path)  # plain `report` without a store is refused (tests/test_hostile_commands.py)
    typo = tmp_path / "rnus" / "ortholab.db"
    main([*command, "--db", f"sqlite:///{typo}"])
    out, err = capsys.readouterr()
    assert listed in out and "does not exist" in err
    assert said in err
    assert list(tmp_path.iterdir()) == []


def test_frames_never_create_a_store(tmp_path):
    typo = tmp_path / "rnus" / "ortholab.db"
    for read in (
        lambda: frames.runs(f"sqlite:///{typo}"),
        lambda: frames.metrics(1, db=f"sqlite:///{typo}"),
        lambda: frames.artifacts(1, db=f"sqlite:///{typo}"),
    ):
        with pytest.raises(StoreError, match="does not exist"):
            read()
    assert list(tmp_path.iterdir()) == []


def test_a_reader_on_an_empty_server_database_creates_no_tables(url, capsys):
    if url.startswith("sqlite"):
        sqlite3.connect(url.removeprefix("sqlite:///")).close()  # an empty file
    said = one_line_error(*cli(capsys, "runs", "--db", url))
    assert "holds no OrthoLab store yet" in said
    assert inspect(create_engine(url)).get_table_names() == []
    assert "`ortholab db upgrade --db URL` makes it an empty store" in said  # a team's dashboard before any run
    main(["db", "upgrade", "--db", url])
    capsys.readouterr()
    main(["runs", "--db", url])
    assert "no runs recorded yet" in capsys.readouterr().out


def _mount(*args) -> bool:
    return (
        os.geteuid() == 0
        and shutil.which("mount") is not None
        and subprocess.run(["mount", *args], capture_output=True).returncode == 0
    )


def _recorded_store(path: Path) -> int:
    store = Store(f"sqlite:///{path}")
    run = store.create_run(name="kept", main_metric="val/loss")
    store.log_metrics(run, {"val/loss": 0.25}, step=4)
    store.set_status(run, "finished")
    store.close()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # WAL folded back: the file alone
    return run


def test_a_store_file_this_process_cannot_write_is_read_without_touching_it(tmp_path, capsys):
    """The file is read-only (a read-only bind mount of it: root ignores permission bits) in a writable folder, so
    a reader that opened it read-write, or `mode=ro` on its WAL, would create -wal/-shm files beside it."""
    path = tmp_path / "runs.db"
    run = _recorded_store(path)
    if not _mount("--bind", "-o", "ro", str(path), str(path)):
        pytest.skip("needs root and mount to make one file read-only")
    try:
        main(["runs", "--json", "--db", f"sqlite:///{path}"])
        (row,) = json.loads(capsys.readouterr().out)
        assert (row["id"], row["name"], row["best"], row["steps"]) == (run, "kept", 0.25, 4)
        assert frames.metrics(run, db=f"sqlite:///{path}")["value"].tolist() == [0.25]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]  # no -wal, -shm or -journal
    finally:
        gc.collect()  # the readers' stores close their files
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_store_on_a_read_only_filesystem_is_readable(tmp_path, capsys):
    folder = tmp_path / "media"
    folder.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)):
        pytest.skip("needs root and mount for a read-only filesystem")
    try:
        run = _recorded_store(folder / "runs.db")
        assert _mount("-o", "remount,ro", str(folder))
        main(["runs", "--json", "--db", f"sqlite:///{folder / 'runs.db'}"])
        assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [run]
        with pytest.raises(StoreError, match="--db"):  # a writer is still told, in one line, that it cannot write
            Store(f"sqlite:///{folder / 'runs.db'}")
    finally:
        gc.collect()
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_the_runs_table_keeps_a_name_with_a_newline_on_its_row(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(url)
    store.create_run(name="two\nlines\there")  # recorded by an older OrthoLab, which did not check names
    main(["runs", "--db", url])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "two\\nlines\\there" in lines[2]
