"""Run management from the command line (issue 49): `ortholab runs` filters and keeps JSON; `runs tag/untag`;
`runs delete` removes a run's rows, points, artifacts and folder after a confirmation, refuses a run being
written, and leaves every other run untouched; on SQLite and on a real PostgreSQL server."""

import json
import sqlite3
from pathlib import Path

import pytest
from postgres import postgres_server, unavailable_reason, wait_until_ready

from ortholab.cli.main import main
from ortholab.db import Store
from ortholab.db.lease import current_owner


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    with postgres_server() as url:
        wait_until_ready(url)
        yield url


def _runs(db, tmp_path) -> list[int]:
    store = Store(db)
    ids = []
    for name, family, task in (("a", "scornn", "copy"), ("b", "lstm", "copy"), ("c", "scornn", "adding")):
        run_dir = tmp_path / "runs" / f"store-{store.store_id[:8]}" / name  # as fit lays out run folders
        run = store.create_run(name=name, family=family, task=task, tags=["x"], run_dir=None)
        folder = run_dir / str(run)
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text("seed_everything: 1\n")
        store.update_run(run, run_dir=str(folder))
        store.log_params(run, {"model.hidden_size": 8})
        store.log_metrics(run, {"val/loss": 0.5}, step=1)
        store.add_artifact(run, "eigenvalues", "eig", data=b"1", step=0)
        store.set_status(run, "finished")
        ids.append(run)
    return ids


def _fingerprint(store: Store, run_id: int) -> tuple:
    run = store.get_run(run_id)
    return (
        run.name,
        run.tags,
        store.params_of([run_id])[run_id],
        [(p.step, p.value) for p in store.metric_series(run_id, "val/loss")],
        [a.name for a in store.artifacts(run_id)],
    )


def test_filters_and_json(db, tmp_path, capsys):
    a, b, c = _runs(db, tmp_path)
    main(["runs", "--db", db, "--family", "scornn", "--json"])
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == sorted([a, c], reverse=True)
    main(["runs", "--db", db, "--task", "copy", "--name", "B", "--json"])
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [b]
    main(["runs", "list", "--db", db, "--task", "copy", "--name", "B", "--json"])  # `runs list`: the same listing
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [b]
    main(["runs", "--db", db, "--status", "running"])
    assert capsys.readouterr().out.strip().startswith("no recorded run matches the filters; no run has --status")
    main(["runs", "--db", db, "--family", "gru"])  # registered, no run of it: an empty list, with those recorded
    out = capsys.readouterr().out.strip()
    assert out.startswith("no recorded run matches the filters; no run has --family gru") and "recorded: " in out
    main(["runs", "--db", db, "--family", "lstm", "--task", "adding"])  # both recorded, no run has both
    assert capsys.readouterr().out.strip() == "no recorded run matches the filters"


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        (
            "--family",
            "scorn",
            "--family scorn: no family of this name is registered or recorded; did you mean "
            "'scornn'? `ortholab list families` names them",
        ),
        ("--family", "LSTM", "--family LSTM: no family of this name is registered or recorded; did you mean 'lstm'?"),
        (
            "--task",
            "copyng",
            "--task copyng: no task of this name is registered or recorded; did you mean "
            "'copying'? `ortholab list tasks` names them",
        ),
    ],
)
def test_a_family_or_task_name_nothing_has_is_refused_in_one_line(db, tmp_path, capsys, flag, value, expected):
    """A typo was an empty list and exit 0, read as 'no such runs yet'; a recorded but unregistered name still lists
    (`--task copy` above), a registered name without runs lists none."""
    _runs(db, tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "--db", db, flag, value])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and not out, err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"ortholab: error: {expected}"), err
    missing = tmp_path / "none" / "runs.db"  # read-only: a mistyped store is named, never made
    with pytest.raises(SystemExit):
        main(["runs", "--db", f"sqlite:///{missing}", flag, value])
    assert not missing.parent.exists()


def test_a_failed_runs_reason_is_listed(db, tmp_path, capsys):
    """A failed run said only `failed` (walk-through 3); its reason is in the store: the table shows it cut, JSON
    whole, and a list with no reason to show has no such column."""
    a, b, c = _runs(db, tmp_path)
    main(["runs", "--db", db])
    assert "reason" not in capsys.readouterr().out.splitlines()[0]
    why = "data.path is not set: give TIMIT's folder; TIMIT (LDC93S1) is licensed by the Linguistic Data Consortium"
    Store(db).set_status(b, "failed", why)
    main(["runs", "--db", db])
    header, _, *lines = capsys.readouterr().out.splitlines()
    (line,) = [line for line in lines if line.startswith(f"{b} ")]
    assert header.rstrip().endswith("reason") and line.rstrip().endswith(why[:59] + "…")
    main(["runs", "--db", db, "--json"])
    assert {r["id"]: r["reason"] for r in json.loads(capsys.readouterr().out)} == {a: None, b: why, c: None}


def test_tag_untag_and_filter_by_tag(db, tmp_path, capsys):
    a, b, c = _runs(db, tmp_path)
    main(["runs", "tag", str(a), str(c), "best", "--db", db])
    assert capsys.readouterr().out.splitlines() == [f"run {a}: tags x, best", f"run {c}: tags x, best"]
    main(["runs", "--db", db, "--tag", "best", "--json"])
    assert sorted(r["id"] for r in json.loads(capsys.readouterr().out)) == [a, c]
    main(["runs", "untag", str(a), "best", "--db", db])
    assert Store(db).get_run(a).tags == ("x",) and Store(db).get_run(c).tags == ("x", "best")
    main(["runs", "--db", db, "--tag", "bset"])  # a typo: named, with the nearest recorded tag
    assert capsys.readouterr().out.strip().endswith("no run has the tag bset (did you mean 'best'?)")
    with pytest.raises(SystemExit) as refused:  # untagging a label the runs lack changed nothing and said nothing
        main(["runs", "untag", str(c), "bset", "--db", db])
    assert refused.value.code == 2
    assert f"no run of {c} has the tag 'bset'; did you mean 'best'?" in capsys.readouterr().err
    assert Store(db).get_run(c).tags == ("x", "best")
    # reproduce's own tags: untagging `flags:...` once made a 200-step run the paper's full-scale row in the report
    Store(db).set_tags(c, add=["flags:--trainer.max_steps 200"])
    for action, label in (("untag", "flags:--trainer.max_steps 200"), ("tag", "seed:3"), ("tag", "paper:t/r")):
        with pytest.raises(SystemExit) as refused:
            main(["runs", action, str(c), label, "--db", db])
        said = capsys.readouterr().err
        assert refused.value.code == 2 and f"{label!r} is one of the tags `reproduce` records" in said
    assert Store(db).get_run(c).tags == ("x", "best", "flags:--trainer.max_steps 200")
    for action, label in (("tag", "sweep:rho-lr"), ("untag", "trial:3")):  # a run put into a sweep it never was in
        with pytest.raises(SystemExit) as refused:
            main(["runs", action, str(c), label, "--db", db])
        said = capsys.readouterr().err
        assert refused.value.code == 2 and f"{label!r} is one of the tags `ortholab sweep` gives" in said
    assert Store(db).get_run(c).tags == ("x", "best", "flags:--trainer.max_steps 200")


def test_the_sweep_tags_runs_refuses_are_the_ones_a_sweep_gives():
    from ortholab.cli.runs import SWEEP_TAGS
    from ortholab.training.lightning_cli import TRIAL_TAGS

    assert SWEEP_TAGS == TRIAL_TAGS


def test_delete_removes_one_run_and_its_folder_and_nothing_else(db, tmp_path, capsys, monkeypatch):
    a, b, c = _runs(db, tmp_path)
    store = Store(db)
    others = {run_id: _fingerprint(store, run_id) for run_id in (a, c)}
    folder = store.get_run(b).run_dir
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    main(["runs", "delete", str(b), "--db", db])  # asked, and answered no
    assert "nothing deleted" in capsys.readouterr().out and store.get_run(b).name == "b"
    main(["runs", "delete", str(b), "--db", db, "--yes"])
    assert f"deleted run {b} (b) and its folder" in capsys.readouterr().out
    assert sorted(r.id for r in store.list_runs()) == [a, c] and not __import__("os").path.exists(folder)
    assert {run_id: _fingerprint(store, run_id) for run_id in (a, c)} == others  # untouched
    assert store.metric_series(b, "val/loss") == [] and store.artifacts(b) == []


def test_deleting_a_run_names_the_predict_runs_that_stay_naming_it(db, tmp_path, capsys, monkeypatch):
    """A predict run records the run it predicted with (info.predict.source_run); deleting that run keeps the
    predictions, and says so before asking and after deleting, with the command that removes them too."""
    a, b, c = _runs(db, tmp_path)
    store = Store(db)
    predictions = []
    for source in (a, a, c):
        run = store.create_run(name="p", stage="predict", family="scornn", task="copy")
        store.update_run(run, info={"predict": {"source_run": source, "split": "test"}})
        predictions.append(run)
    assert store.runs_made_from([a, b]) == {a: {"predict": predictions[:2]}}  # a fit run's info is never a link
    asked = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "y")
    main(["runs", "delete", str(a), str(b), "--db", db])
    assert f"; keeping runs {predictions[0]}, {predictions[1]} (predictions of run {a})? [y/N]" in asked[0]
    said = capsys.readouterr().out.splitlines()
    first, second = predictions[:2]
    assert said[1] == (
        f"kept runs {first}, {second} (predictions of run {a}), naming a run no longer in this store: "
        f"`ortholab runs delete {first} {second}` removes them too"
    ), said
    assert sorted(r.id for r in store.list_runs()) == sorted([c, *predictions])
    main(["runs", "delete", str(c), str(predictions[2]), "--db", db, "--yes"])  # deleted together: nothing to say
    assert not any("kept" in line for line in capsys.readouterr().out.splitlines())


def test_a_deleted_runs_id_is_never_given_to_a_new_run(db, tmp_path, capsys):
    """A note, a bookmark or a sweep trial that names run c must not come to name another run: deleting the latest
    run does not hand its id to the next (SQLite's AUTOINCREMENT; PostgreSQL's sequence)."""
    a, b, c = _runs(db, tmp_path)
    main(["runs", "delete", str(c), "--db", db, "--yes"])
    capsys.readouterr()
    assert Store(db).create_run(name="d", family="lstm", task="copy") > c  # PostgreSQL may skip ids, never reuse one


def test_opening_a_store_to_write_uses_up_no_run_id(db):
    """The check that a store is writable inserts a run and rolls it back: on PostgreSQL that took a sequence number
    each time (runs 3, 7, 11 ... in a fresh database shared by a team); its probe row has its own id now."""
    store = Store(db)  # made
    for _ in range(3):
        Store(db, access="write").close()
    assert [store.create_run(name=name, family="lstm", task="copy") for name in "ab"] == [1, 2]


def test_delete_refuses_a_run_being_written_and_asks_where_it_cannot(db, tmp_path, capsys, monkeypatch):
    a, b, c = _runs(db, tmp_path)
    writer = Store(db)
    owner = current_owner().token
    writer.acquire_run(a, owner)  # a live process writes run a
    with pytest.raises(SystemExit) as stop:
        main(["runs", "delete", str(a), str(c), "--db", db, "--yes"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "still being written" in err[0] and "delete it" in err[0]
    assert sorted(r.id for r in Store(db).list_runs()) == [a, b, c]  # nothing deleted, c included
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    with pytest.raises(SystemExit) as stop:
        main(["runs", "delete", str(c), "--db", db])
    assert stop.value.code == 2 and "add --yes" in capsys.readouterr().err
    for argv, says in (
        (["runs", "delete", "x1"], "'x1' is not a run id"),
        (["runs", "tag", "3"], "then the label"),
        (["runs", "delete", "99", "--yes"], "No run with id 99"),
    ):
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--db", db])
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and len(err) == 1 and says in err[0], err


def test_a_mistyped_flag_is_named_not_the_value_argparse_then_misreads(db, tmp_path, capsys):
    """`runs --statsu finished` said "argument action: invalid choice: 'finished'", never naming --statsu."""
    _runs(db, tmp_path)
    for args in (["--statsu", "finished"], ["--statsu"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["runs", "--db", db, *args])
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and line.startswith(
            "ortholab: error: unknown flag --statsu; did you mean --status?"
        )


def test_deleting_from_a_copy_of_a_store_keeps_the_originals_run_folder(db, tmp_path, capsys):
    """A copy (an export's runs.db) names the run folders of the store it was copied from: they are not its own."""
    if not db.startswith("sqlite"):
        pytest.skip("a file copy of a store: SQLite")
    a, b, c = _runs(db, tmp_path)
    store = Store(db)
    copy = tmp_path / "copy.db"
    with sqlite3.connect(db.removeprefix("sqlite:///")) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    with sqlite3.connect(copy) as target:  # the copy is a store of its own (as export writes one)
        target.execute("UPDATE store_info SET value = 'feedface' || value WHERE key = 'store_id'")
    main(["runs", "delete", str(a), "--db", f"sqlite:///{copy}", "--yes"])
    assert "is not this store's" in capsys.readouterr().out and Path(store.get_run(a).run_dir).is_dir()
    main(["runs", "delete", str(b), "--db", db, "--yes"])  # the original's own run: its folder goes
    assert "and its folder" in capsys.readouterr().out
