"""`ortholab runs [filters] --export DIR`: a researcher's own runs (from `fit` or `sweep`, no paper table) handed on
as evidence: DIR/runs.db holds exactly the runs listed, runs.csv a line per run with the commit, machine and command
that trained it, export.txt who wrote them; the store read is left as it was, and nothing listed writes nothing."""

import csv
import hashlib
import json

import pytest

from ortholab.app.export import UNKNOWN_COMMIT, check_export_folder
from ortholab.cli.main import main
from ortholab.db import Store


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _store(tmp_path) -> tuple[str, dict[str, int]]:
    """Four finished fits: two scoRNN on copying (one recording its code and command, one from an OrthoLab that
    recorded neither), an LSTM on copying and a scoRNN on MNIST; each with params and a val/ and train/ series."""
    db = f"sqlite:///{tmp_path / 'source.db'}"
    store = Store(db)
    ids = {}
    for name, family, task, hidden in (
        ("copy_a", "scornn", "copying", 64),
        ("copy_b", "scornn", "copying", 128),
        ("copy_lstm", "lstm", "copying", 40),
        ("mnist_a", "scornn", "mnist", 170),
    ):
        run = store.create_run(name=name, family=family, task=task, main_metric="val/loss", tags=["mine"])
        store.log_params(run, {"model": {"family": family, "hidden_size": hidden}, "data": {"seq_len": 100}})
        for step in range(5):
            store.log_metrics(run, {"val/loss": 1.0 / (step + hidden), "train/loss": 2.0 / (step + 1)}, step=step * 10)
        store.set_status(run, "finished")
        ids[name] = run
    store.update_run(
        ids["copy_a"],
        info={"code": [{"commit": "abc1234", "machine": "Xeon, 2"}], "command": "ortholab fit --config mine.yaml"},
    )
    store.add_artifact(ids["copy_a"], "eigenvalues", "W", step=40, data=b"\x00" * 16)
    store.close()  # its writes folded into the file: the bytes compared after the export are the whole store
    return db, ids


def _runs(db: str) -> dict[int, str]:
    store = Store(db, access="read")
    try:
        return {run.id: run.name for run in store.list_runs()}
    finally:
        store.close()


def test_the_export_holds_exactly_the_listed_runs_and_leaves_the_store_as_it_was(tmp_path, capsys):
    db, ids = _store(tmp_path)
    source = tmp_path / "source.db"
    before = _digest(source)
    out = tmp_path / "share"
    main(["runs", "--db", db, "--family", "scornn", "--task", "copying", "--export", str(out)])
    assert _digest(source) == before  # read, never written
    wanted = {ids["copy_a"]: "copy_a", ids["copy_b"]: "copy_b"}
    exported = f"sqlite:///{out / 'runs.db'}"
    assert _runs(exported) == wanted
    original, copy = Store(db, access="read"), Store(exported, access="read")
    assert copy.params_of(wanted) == original.params_of(wanted)
    for run_id in wanted:
        assert copy.metric_keys(run_id) == original.metric_keys(run_id) == ["train/loss", "val/loss"]
        for key in ("train/loss", "val/loss"):
            points = [(p.step, p.value) for p in copy.metric_series(run_id, key)]
            assert points == [(p.step, p.value) for p in original.metric_series(run_id, key)] and len(points) == 5
    assert copy.artifacts(ids["copy_a"]) == []  # only with --with-artifacts, as report's export
    capsys.readouterr()
    main(["runs", "--db", exported, "--json"])  # the store read as any other
    assert [row["id"] for row in json.loads(capsys.readouterr().out)] == sorted(wanted, reverse=True)
    main(["runs", "--db", exported])
    listed = capsys.readouterr().out
    assert "copy_a" in listed and "copy_b" in listed and "copy_lstm" not in listed and "a copy an export" in listed
    provenance = (out / "export.txt").read_text()
    assert provenance.startswith("written by `ortholab runs --export` on ") and f"from the store {db}" in provenance
    assert f"runs: {', '.join(map(str, sorted(wanted)))} (in runs.db;" in provenance


def test_exporting_again_into_the_folder_says_which_export_it_replaced(tmp_path, capsys):
    """A second export into the same folder replaced the first's files without a word."""
    db, ids = _store(tmp_path)
    out = tmp_path / "share"
    main(["runs", "--db", db, "--family", "lstm", "--export", str(out)])
    first = (out / "export.txt").read_text().splitlines()[0]
    assert "replace" not in capsys.readouterr().err
    main(["runs", "--db", db, "--export", str(out)])
    said = capsys.readouterr().err.splitlines()
    assert said[-1] == f"(these replace the export {first.removeprefix('written ')})"
    assert set(_runs(f"sqlite:///{out / 'runs.db'}")) == set(ids.values())


def test_runs_csv_has_a_line_per_run_with_the_commit_machine_and_command_that_trained_it(tmp_path, capsys):
    db, ids = _store(tmp_path)
    out = tmp_path / "share"
    main(
        ["runs", "--db", db, "--tag", "mine", "--name", "copy", "--columns", "model.hidden_size", "--export", str(out)]
    )
    with open(out / "runs.csv", newline="") as file:
        lines = list(csv.DictReader(file))
    assert {line["name"] for line in lines} == {"copy_a", "copy_b", "copy_lstm"}  # one line each, nothing else
    by_name = {line["name"]: line for line in lines}
    header = list(lines[0])
    assert header[:3] == ["id", "name", "stage"] and header[-4:] == ["tags", "commit", "machine", "command"]
    assert header.index("model.hidden_size") == header.index("baseline") + 1  # where the listing shows it
    assert by_name["copy_b"]["model.hidden_size"] == "128" and by_name["copy_lstm"]["family"] == "lstm"
    recorded = by_name["copy_a"]
    assert recorded["id"] == str(ids["copy_a"]) and recorded["status"] == "finished" and recorded["tags"] == "mine"
    assert "abc1234" in recorded["commit"] and recorded["machine"].endswith("(Xeon, 2)")
    assert recorded["command"] == "ortholab fit --config mine.yaml"
    assert by_name["copy_b"]["commit"] == UNKNOWN_COMMIT and by_name["copy_b"]["command"] == "not recorded"
    assert "wrote " in capsys.readouterr().err


def test_with_artifacts_the_exported_store_holds_them(tmp_path):
    db, ids = _store(tmp_path)
    out = tmp_path / "share"
    main(["runs", "--db", db, "--name", "copy_a", "--export", str(out), "--with-artifacts"])
    copy = Store(f"sqlite:///{out / 'runs.db'}", access="read")
    assert [a.kind for a in copy.artifacts(ids["copy_a"])] == ["eigenvalues"]


def test_no_run_listed_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    db, _ = _store(tmp_path)
    out = tmp_path / "share"
    with pytest.raises(SystemExit) as refused:
        main(["runs", "--db", db, "--family", "lstm", "--task", "mnist", "--export", str(out)])
    err = capsys.readouterr().err.strip()
    assert refused.value.code == 2 and len(err.splitlines()) == 1
    assert f"--export {out}: no recorded run matches the filters" in err and "nothing written" in err
    assert not out.exists()


def test_export_with_an_action_or_artifacts_without_export_is_one_line(tmp_path, capsys):
    db, _ = _store(tmp_path)
    for argv, says in (
        (["runs", "show", "1", "--export", str(tmp_path / "x")], "runs show: --export exports a listing"),
        (["runs", "tag", "1", "best", "--export", str(tmp_path / "x")], "runs tag: --export exports a listing"),
        (["runs", "--with-artifacts"], "--with-artifacts applies only to an export"),
        (["runs", "--with-checkpoints"], "--with-checkpoints applies only to an export"),
        (["runs", "show", "1", "--with-checkpoints"], "runs show: --with-checkpoints exports a listing"),
    ):
        with pytest.raises(SystemExit) as refused:
            main([*argv, "--db", db])
        err = capsys.readouterr().err.strip()
        assert refused.value.code == 2 and len(err.splitlines()) == 1 and says in err, argv
    assert not (tmp_path / "x").exists() and "best" not in Store(db, access="read").get_run(1).tags


def test_the_export_guards_the_store_read_another_store_and_a_reports_folder(tmp_path, capsys):
    db, _ = _store(tmp_path)
    source = tmp_path / "source.db"
    before = _digest(source)
    own = tmp_path / "own"
    own.mkdir()
    Store(f"sqlite:///{own / 'runs.db'}").close()  # a store of its own, no export's copy
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.csv").write_text("table,kind\ndemo_table9,row\n")
    reading = tmp_path / "reading"
    reading.mkdir()
    (reading / "runs.db").write_bytes(source.read_bytes())
    for db_url, folder, says in (
        (db, own, "is a store of its own (0 runs), not an earlier export's copy"),
        (db, report, "it holds a report's export"),
        (f"sqlite:///{reading / 'runs.db'}", reading, "is the store this listing reads (--db)"),
        (db, "", "--export '': give the folder to write the runs into"),
    ):
        with pytest.raises(SystemExit) as refused:
            main(["runs", "--db", db_url, "--export", str(folder)])
        captured = capsys.readouterr()
        assert refused.value.code == 2 and says in captured.err and captured.out == "", folder
    assert _digest(source) == before and sorted(p.name for p in report.iterdir()) == ["report.csv"]
    assert _runs(f"sqlite:///{own / 'runs.db'}") == {}
    shared = tmp_path / "share"
    main(["runs", "--db", db, "--export", str(shared)])
    main(["runs", "--db", db, "--name", "mnist", "--export", str(shared)])  # an earlier export is brought up to date
    assert list(_runs(f"sqlite:///{shared / 'runs.db'}").values()) == ["mnist_a"]
    with pytest.raises(Exception, match="it holds an export of runs"):  # a report would replace its runs.db
        check_export_folder(shared, {})


def test_an_unfinished_run_exported_with_checkpoints_is_restored_elsewhere_to_go_on(tmp_path, capsys):
    """`runs --export DIR --with-checkpoints`: an unfinished run of one's own (no paper table) travels with its config
    and checkpoints, and `ortholab restore DIR` makes it the store and run folder of another runs folder, where `fit
    --resume` finds them; a finished run's folder stays behind (no checkpoint of a NaN guard to keep)."""
    db, ids = _store(tmp_path)
    store = Store(db)
    folder = tmp_path / "A" / "store-0a1b2c3d" / "copy_b" / str(ids["copy_b"])  # as a fit lays out its folder
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text(f"runs_dir: {tmp_path / 'A'}\n")
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    store.update_run(ids["copy_b"], run_dir=str(folder))
    store.set_status(ids["copy_b"], "interrupted")
    store.close()
    out = tmp_path / "share"
    main(["runs", "--db", db, "--tag", "mine", "--export", str(out), "--with-checkpoints"])
    held = out / "checkpoints" / "store-0a1b2c3d" / "copy_b" / str(ids["copy_b"])
    assert (held / "checkpoints" / "last.ckpt").read_bytes() == b"weights"
    assert sorted(p.name for p in (out / "checkpoints" / "store-0a1b2c3d").iterdir()) == ["copy_b"]
    assert f"wrote {held / 'checkpoints' / 'last.ckpt'}" in capsys.readouterr().err
    main(["restore", str(out), "--runs-dir", str(tmp_path / "B")])
    assert f"Unfinished, with their checkpoints: {ids['copy_b']}." in capsys.readouterr().out
    restored = Store(f"sqlite:///{tmp_path / 'B' / 'ortholab.db'}", access="read")
    moved = restored.get_run(ids["copy_b"]).run_dir
    assert moved == str(tmp_path / "B" / "store-0a1b2c3d" / "copy_b" / str(ids["copy_b"]))
    assert (tmp_path / "B" / "store-0a1b2c3d" / "copy_b" / str(ids["copy_b"]) / "config.yaml").read_text() == (
        f"runs_dir: {tmp_path / 'B'}\n"
    )
    restored.close()
