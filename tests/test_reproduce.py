"""Published numbers beside reproduced runs: the table files, the report, and `ortholab reproduce` end to end."""

import json
import re
import time
from pathlib import Path

import pytest
import yaml

import ortholab.db.published as published
from ortholab.cli.main import main
from ortholab.cli.reproduce import last_flags_win
from ortholab.db import Store, StoreError
from ortholab.db.published import comparison_rows, load_table, load_tables, markdown_report, reproductions

TABLE = {
    "paper": "scornn-icml2018",
    "table": "Table 9",
    "title": "a test table",
    "metric": "test/acc",
    "mode": "max",
    "scale": 100,
    "rows": [
        {"row": "mnist_scornn_n8", "task": "mnist", "family": "scornn", "hidden_size": 8, "value": 98.1},
        {
            "row": "copy_lstm",
            "task": "copying",
            "family": "lstm",
            "value": None,
            "outcome": "stays at the baseline",
            "expect": "at_baseline",
            "metric": "val/loss",
            "mode": "min",
            "scale": 1,
        },
        {"row": "never_run", "task": "adding", "family": "srnn", "value": 0.01},
    ],
}


def _write(tmp_path, data, name="demo_table9.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _use_tables(tmp_path, monkeypatch, **tables) -> None:
    """Make these table files (stem -> content) the only published tables."""
    folder = tmp_path / "published"
    folder.mkdir()
    for stem, data in tables.items():
        (folder / f"{stem}.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(published, "PUBLISHED_DIR", folder)
    monkeypatch.setattr(published, "CHECKS_DIR", tmp_path / "no-checks")


def _toy(metric: str, rows: list[dict]) -> dict:
    return {"paper": "toy", "table": "Figure 1", "metric": metric, "mode": "min", "rows": rows}


def _copying_rows(config: str, *names: str) -> list[dict]:
    return [{"row": name, "task": "copying", "family": "scornn", "value": None, "config": config} for name in names]


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda t: t.pop("metric"), "missing key `metric`"),
        (lambda t: t["rows"].append(dict(t["rows"][0])), "appears twice"),
        (lambda t: t["rows"][0].update(mode="up"), "mode 'up'"),
        (lambda t: t["rows"][1].update(expect="better"), "expect 'better'"),
    ],
)
def test_a_malformed_table_names_the_file_and_the_problem(tmp_path, change, message):
    data = json.loads(json.dumps(TABLE))
    change(data)
    path = _write(tmp_path, data)
    with pytest.raises(StoreError, match=message) as err:
        load_table(path)
    assert str(path) in str(err.value)


def test_rows_inherit_the_tables_metric_unless_they_override_it(tmp_path):
    table = load_table(_write(tmp_path, TABLE))
    first, second, _ = table.rows
    assert (first.metric, first.mode, first.scale, first.tag) == (
        "test/acc",
        "max",
        100.0,
        "paper:demo_table9/mnist_scornn_n8",
    )
    assert (second.metric, second.mode, second.scale) == ("val/loss", "min", 1.0)


def test_the_report_reads_test_runs_falls_back_to_val_and_judges_qualitative_rows(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    table = load_table(_write(tmp_path, TABLE))
    mnist, copy, _ = table.rows
    fit = store.create_run(
        name="a",
        family="scornn",
        task="mnist",
        tags=[mnist.tag, "scale:full"],
        main_metric="val/acc",
        main_metric_mode="max",
    )
    for step, acc in enumerate([0.5, 0.93, 0.91]):
        store.log_metrics(fit, {"val/acc": acc}, step=step)
    store.set_status(fit, "finished")
    copy_run = store.create_run(
        name="b", family="lstm", task="copying", tags=[copy.tag], main_metric="val/loss", baseline=0.5
    )
    store.log_metrics(copy_run, {"val/loss": 0.48}, step=0)
    store.set_status(copy_run, "finished")

    items = reproductions(store, table)
    assert items[0].value == pytest.approx(93.0) and items[0].measured_as == "val/acc"  # no test run yet
    assert items[1].verdict == "at_baseline" and items[2].status == "not yet run"

    test_run = store.create_run(name="a", stage="test", family="scornn", task="mnist", tags=[mnist.tag])
    store.log_metrics(test_run, {"test/acc": 0.925}, step=2)
    store.set_status(test_run, "finished")
    items = reproductions(store, table)
    assert items[0].value == pytest.approx(92.5) and items[0].measured_as == "test/acc"
    report = markdown_report(store, {"demo_table9": table})
    assert (
        "| mnist_scornn_n8 | - | scornn | 8 | - | 98.1 | 92.5 | 1 seed | - | 2 steps | below | finished | full | 1 |"
        in report
    )
    assert "at baseline (val/loss 0.48) ✓" in report and "not yet run" in report
    assert "metric: `test/acc` (max), published = 100 x OrthoLab value; rows with their own: `val/loss` (min)" in report


def test_reproduce_runs_a_row_in_cpu_smoke_tags_it_and_reports_it(tmp_path, monkeypatch, capsys):
    config = yaml.safe_load(open(published.PUBLISHED_DIR.parents[1] / "demo" / "copying_scornn.yaml"))
    config["model"]["hidden_size"], config["model"]["family_args"] = 8, {"rho": 4}
    config["data"]["init_args"].update(seq_len=5, batch_size=10, eval_batch_size=50)
    config["trainer"].update(enable_progress_bar=False, enable_model_summary=False)
    config_path = tmp_path / "row.yaml"
    config_path.write_text(yaml.safe_dump(config))
    table = {
        "paper": "scornn-icml2018",
        "table": "Figure 1",
        "title": "copying",
        "metric": "val/loss",
        "mode": "min",
        "rows": [
            {
                "row": "copy_T5_scornn",
                "task": "copying",
                "family": "scornn",
                "value": None,
                "expect": "below_baseline",
                "config": str(config_path),
                "args": ["--trainer.max_steps", "2000"],  # the smoke scale's 40 replace it
            },
            {"row": "pending", "task": "copying", "family": "urnn", "config": None},
        ],
    }
    tables_dir = tmp_path / "published"
    tables_dir.mkdir()
    _write(tables_dir, table, "toy_figure1.yaml")
    monkeypatch.setattr(published, "PUBLISHED_DIR", tables_dir)
    monkeypatch.setattr(published, "CHECKS_DIR", tmp_path / "no-checks")
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"

    main(["reproduce", "--list", "--db", db, "--json"])
    listed = json.loads(capsys.readouterr().out)
    assert [(r["row"], r["status"]) for r in listed] == [("copy_T5_scornn", "not yet run"), ("pending", "not yet run")]

    main(["reproduce", "toy_figure1", "--scale", "cpu-smoke", "--db", db])
    out = capsys.readouterr().out
    assert "paper:toy_figure1/pending: skipped, no config" in out
    assert out.strip().splitlines()[-1] == "reproduce: 1 done, 0 failed, 1 skipped"  # the line scripts read
    (run,) = Store(db).list_runs()
    assert run.status == "finished" and set(run.tags) == {
        "paper:toy_figure1/copy_T5_scornn",
        "scale:cpu-smoke",
        "seed:5544",
    }  # the config's seed
    assert run.steps == 40 and run.name == "toy_figure1.copy_T5_scornn"  # the smoke scale's 40 steps
    command = Store(db).get_run(run.id).info["command"]  # each setting once (it read --trainer.max_steps 2000 40)
    assert command.count("--trainer.max_steps") == 1 and "--trainer.max_steps 40" in command
    main(["reproduce", "--list", "toy_figure1", "--db", db])  # a smoke run: listed with its scale, not a result
    assert "finished; cpu-smoke scale" in capsys.readouterr().out
    main(["reproduce", "--list", "--db", db])
    (counts,) = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("toy_figure1")]
    assert counts[-4:] == ["2", "1", "1", "0"]  # rows, with config, run, finished at the paper's settings

    main(["report", "toy_figure1", "--db", db, "--wide"])  # every column, the empty ones too
    report = capsys.readouterr().out
    assert "| copy_T5_scornn | - | scornn | - | - | - |" in report and f"| cpu-smoke | {run.id} |" in report
    assert "✓" not in report and "✗" not in report  # a smoke run shows that the row runs: not judged by the paper


def test_unknown_table_or_row_is_one_clear_message(tmp_path, monkeypatch, capsys):
    tables_dir = tmp_path / "published"
    tables_dir.mkdir()
    _write(tables_dir, TABLE)
    monkeypatch.setattr(published, "PUBLISHED_DIR", tables_dir)
    monkeypatch.setattr(published, "CHECKS_DIR", tmp_path / "no-checks")
    for argv, message in (
        (["reproduce", "nope"], "no published table 'nope'"),
        (["reproduce", "demo_table9", "--rows", "x"], "--rows: 'x' is not a row"),
        (["reproduce", "demo_table9", "--rows", "mnist_scornn_n9"], "did you mean 'mnist_scornn_n8'? its rows are"),
        (["reproduce", "demo_table9", "--scale", "huge"], "--scale 'huge'"),
        (["report", "nope"], "no published table 'nope'"),
        (["report", "demo_tabel9"], "no published table 'demo_tabel9'; did you mean 'demo_table9'?"),
        (["reproduce", "demo_tabel9"], "did you mean 'demo_table9'?"),
        (["report", "--shared-plotly"], "--shared-plotly applies only to an export: add --export DIR"),
        (["report", "--with-artifacts"], "--with-artifacts applies only to an export: add --export DIR"),
        (["report", "--with-checkpoints"], "--with-checkpoints applies only to an export: add --export DIR"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--db", f"sqlite:///{tmp_path / 'x.db'}"])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_later_group_of_flags_replaces_an_earlier_groups_same_key_and_config_and_appends_are_kept():
    row = ["--data.seq_len", "100", "--trainer.max_steps", "2000", "--config", "a.yaml", "--trainer.callbacks+", "X"]
    smoke = ["--trainer.max_steps=40", "--trainer.callbacks+", "Y"]
    user = ["--data.seq_len", "-5", "--config", "b.yaml"]
    assert last_flags_win(row, smoke, user) == [
        *["--config", "a.yaml", "--trainer.callbacks+", "X"],
        *["--trainer.max_steps=40", "--trainer.callbacks+", "Y"],
        *user,
    ]
    steps = ["--trainer.callbacks+", "X", "--trainer.callbacks.steps", "[0]", "-c", "a.yaml", "--data", "mnist"]
    again = ["--trainer.callbacks+", "Y", "--trainer.callbacks.steps", "[5]", "-c", "b.yaml", "--data", "copying"]
    assert last_flags_win(steps, again) == [*steps, *again]  # review: each applies where it stands


def test_a_tables_list_names_each_rows_own_flags_after_its_config(tmp_path, monkeypatch, capsys):
    """Walk-through 4: `reproduce --list cpu_checks` named the T = 1000 config for its T = 100 rows, the flags that
    make them T = 100 unsaid."""
    row = {"task": "copying", "family": "scornn", "value": None, "config": "c.yaml"}
    shorter = {**row, "row": "short", "args": ["--data.seq_len", "100", "--name", "two words"]}
    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", [shorter, {**row, "row": "plain"}]))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["reproduce", "toy_figure1", "--list", "--wide", "--db", db])
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "c.yaml --data.seq_len 100 --name 'two words'  " in lines["short"]  # quoted as a shell takes it
    assert "c.yaml  " in lines["plain"] and "--" not in lines["plain"]
    main(["reproduce", "toy_figure1", "--list", "--json", "--db", db])
    listed = {r["row"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["short"]["config"] == "c.yaml" and listed["short"]["args"] == shorter["args"]


def test_a_tables_list_and_the_report_show_what_was_asked_in_lines_of_120_columns(tmp_path, monkeypatch, capsys):
    """Issue 49: `reproduce scornn_table1 --list` printed every table's rows in lines of up to 300 characters and
    `report` on a store without paper runs printed hundreds of lines of 'not yet run'."""
    long = "stays at the baseline for the first few thousand steps, then falls well below it " * 3
    row = {"task": "copying", "family": "scornn", "value": None, "outcome": long}
    _use_tables(
        tmp_path,
        monkeypatch,
        toy_figure1=_toy("val/loss", [{**row, "row": "ran", "config": "c.yaml"}, {**row, "row": "never_ran"}]),
        other_table2=_toy("val/loss", [{**row, "row": "elsewhere"}]),
    )
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(db)
    run = store.create_run(
        name="a", family="scornn", task="copying", tags=["paper:toy_figure1/ran"], main_metric="val/loss", baseline=0.5
    )
    store.log_metrics(run, {"val/loss": 0.1}, step=0)
    store.set_status(run, "finished")

    def out(*argv):
        main([*argv, "--db", db])
        return capsys.readouterr().out

    def widest(text):
        return max(len(line) for line in text.splitlines())

    listed = out("reproduce", "toy_figure1", "--list")
    assert "never_ran" in listed and "elsewhere" not in listed and "…" in listed and widest(listed) <= 120
    every_table = out("reproduce", "--list").splitlines()  # no TABLE: one line a table with its counts, not its rows
    counts = {line.split()[0]: line.split()[-4:] for line in every_table if line.startswith(("toy_", "other_"))}
    assert counts == {"toy_figure1": ["2", "1", "1", "1"], "other_table2": ["1", "0", "0", "0"]}
    assert len(every_table) == 5 and "never_ran" not in "".join(every_table) and every_table[-1].startswith("`ortholab")
    assert long.strip() in out("reproduce", "toy_figure1", "--list", "--wide")
    report = out("report")
    assert report.startswith("### toy_figure1: ")  # each table under the id `report TABLE` takes
    assert "| ran |" in report and "never_ran" not in report and "elsewhere" not in report
    assert "2 of 3 rows not yet run are not shown (--all shows every row)" in report
    assert "A row fills in once" not in report  # said only where no row has run
    Store(empty := f"sqlite:///{tmp_path / 'new.db'}")  # a store the demo made: runs, none of a paper's row
    main(["report", "--db", empty])
    nothing = capsys.readouterr().out
    assert "3 of 3 rows not yet run are not shown" in nothing and widest(nothing) <= 120
    assert "A row fills in once `ortholab reproduce TABLE` trains it" in nothing.replace("\n", " ")
    assert "…" in report and widest(report) <= 120
    assert report.strip().splitlines()[-1] == "(cells ending in … are cut to fit 120 columns; --wide shows them whole)"
    every = out("report", "--all")
    assert "| never_ran |" in every and "| elsewhere |" in every and widest(every) <= 120
    assert long.strip() in out("report", "--wide")


def test_a_terminals_report_never_cuts_a_rows_length(capsys):
    """At 120 columns the report cut '20000/20000 steps' to '20000/2…' (left alone in stop 79): a count cut is
    unreadable. The column is never cut now, its unit in the header where every row counts steps alone, and every
    row's count is the one --wide shows."""
    db = str(Path(__file__).parents[1] / "docs" / "results" / "scurnn_figure5" / "runs.db")

    def table(*flags):
        main(["report", "scurnn_figure5", "--db", db, *flags])
        lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
        header = [cell.strip() for cell in lines[0].strip("|").split("|")]
        return header, [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]]

    header, terminal = table()
    _, wide = table("--wide")
    assert "steps" in header and "length" not in header and len(terminal) == len(wide) >= 10
    for short, whole in zip(terminal, wide):
        assert short["row"] == whole["row"] and f"{short['steps']} steps" == whole["length"]
        assert re.fullmatch(r"\d+/\d+", short["steps"])


def test_epoch_bounded_rows_show_their_epochs_in_a_terminal():
    """An epoch-bounded row's length in a terminal is its epoch count, whole."""
    lengths = ["3300/77000 steps, epoch 3/70", "-"]
    assert published._terse_lengths(lengths) == ("length", ["epoch 3/70", "-"])
    assert published._terse_lengths(["12/40 steps", "-"]) == ("steps", ["12/40", "-"])


def test_tables_fit_the_terminal_and_a_file_or_pipe_gets_120_columns(monkeypatch):
    """A 200-column terminal (COLUMNS) is used whole; a pipe gets LINE_WIDTH whatever the window; never under 80."""
    import io

    from ortholab.cli.common import LINE_WIDTH, line_width

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert line_width() == LINE_WIDTH == 120
    monkeypatch.setattr("sys.stdout", Terminal())
    assert line_width() == 200
    monkeypatch.setenv("COLUMNS", "40")
    assert line_width() == 80


def test_a_terminals_report_says_shared_values_once_and_keeps_the_reproduced_value(tmp_path, monkeypatch, capsys):
    """`report` in 120 columns cut every one of a dozen cells to eight characters ('above b…'): the columns the row
    ids already name (family, n, setting) are left out, those of one value in every row are said once above the
    table, and the reproduced value is cut last; "published = 1 x OrthoLab value" said nothing."""
    long = "drops below the baseline after a few hundred steps and stays far below it until the end of training " * 2
    row = {"task": "copying", "family": "scornn", "setting": "T=100", "value": None, "expect": "below_baseline"}
    rows = [{**row, "row": f"copying-T100_scornn_n{n}", "hidden_size": n, "outcome": long} for n in (190, 64)]
    scaled = {**_toy("test/acc", [{**row, "row": "mnist", "hidden_size": 8, "value": 97.3}]), "scale": 100}
    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", rows), toy_table2=scaled)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(db)
    for n, loss in ((190, 0.0001234), (64, 0.0005678)):
        run = store.create_run(
            name=f"r{n}",
            family="scornn",
            task="copying",
            tags=[f"paper:toy_figure1/copying-T100_scornn_n{n}", "scale:full"],
            main_metric="val/loss",
            baseline=0.5,
        )
        store.log_metrics(run, {"val/loss": loss}, step=0)
        store.set_status(run, "finished")
    store.close()
    main(["report", "--db", db])
    text = capsys.readouterr().out
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| row "))
    cells = [cell.strip() for cell in lines[header].split(" | ")]
    assert cells[1:3] == ["published", "reproduced"]  # no setting, family or n: the ids name them
    table = lines[header : header + 4]  # header, rule and both rows: the columns line up (each | at one place)
    assert len({tuple(i for i, ch in enumerate(line) if ch == "|") for line in table}) == 1, "\n".join(table)
    assert "every row: " in text and "status finished" in text and "scale full" in text
    assert "below baseline (0.0001234) ✓" in text and "below baseline (0.0005678) ✓" in text  # metric: said above
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "x OrthoLab value" not in text  # toy_table2 (scale 100) has no run: not shown
    main(["report", "--all", "--db", db])
    every = capsys.readouterr().out
    assert every.count("x OrthoLab value") == 1 and "published = 100 x OrthoLab value" in every
    main(["report", "--wide", "--db", db])
    wide = capsys.readouterr().out  # the full table: every column on every line
    assert "| copying-T100_scornn_n190 | T=100 | scornn | 190 |" in wide and long.strip() in wide


def test_the_repositorys_tables_load_and_their_configs_exist():
    tables = load_tables()
    assert "cpu_checks" in tables and len(tables) > 10 and all(table.rows for table in tables.values())
    root = published.PUBLISHED_DIR.parents[2]
    for table in tables.values():
        for row in table.rows:
            assert row.config is None or (root / row.config).is_file(), f"{row.tag}: no {row.config}"


def test_accuracy_rows_are_judged_above_the_baseline(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    table = load_table(
        _write(
            tmp_path,
            {
                "paper": "p",
                "table": "t",
                "metric": "val/acc",
                "mode": "max",
                "rows": [
                    {"row": "fits", "task": "mnist", "family": "lstm", "expect": "above_baseline"},
                    {"row": "fails", "task": "mnist", "family": "rnn", "expect": "at_baseline"},
                ],
            },
        )
    )
    for row, best in zip(table.rows, (0.95, 0.105)):
        run = store.create_run(
            name=row.row, tags=[row.tag], main_metric="val/acc", main_metric_mode="max", baseline=0.1
        )
        store.log_metrics(run, {"val/acc": best}, step=1)
    assert [item.verdict for item in reproductions(store, table)] == ["above_baseline", "at_baseline"]


@pytest.mark.slow
def test_one_real_row_per_family_runs_at_cpu_smoke_scale(tmp_path, monkeypatch, capsys):
    """Every family's paper configs run through `ortholab reproduce --scale cpu-smoke` (generated-data rows)."""

    def length(row):  # the shortest sequences of each family's rows keep the test short
        found = re.search(r"T\s*=\s*(\d+)", row.setting or "")
        return (
            int(row.args[row.args.index("--data.seq_len") + 1])
            if "--data.seq_len" in row.args
            else int(found.group(1))
            if found
            else 10_000
        )

    chosen = {}
    for table in load_tables().values():
        for row in table.rows:
            if (
                row.config
                and row.task in ("copying", "adding")
                and (row.family not in chosen or length(row) < length(chosen[row.family]))
            ):
                chosen[row.family] = row
    assert {"scornn", "scurnn", "ornn", "srnn", "lstm", "urnn", "eurnn", "fcurnn", "nru", "nnrnn"} <= set(chosen)
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    for _family, row in sorted(chosen.items()):
        main(
            [
                "reproduce",
                row.table,
                "--rows",
                row.row,
                "--scale",
                "cpu-smoke",
                "--db",
                db,
                "--trainer.enable_progress_bar",
                "false",
                "--trainer.enable_model_summary",
                "false",
            ]
        )
    out = capsys.readouterr().out
    runs = Store(db).list_runs()
    assert sorted(r.family for r in runs) == sorted(chosen), out
    assert all(r.status == "finished" and r.steps == 40 for r in runs), [(r.name, r.status, r.steps) for r in runs]


def test_the_papers_protocol_value_sits_beside_the_validation_selected_one_with_a_verdict(tmp_path):
    """Best test accuracy over the epoch ends (the paper) first, the checkpoint chosen on validation beside it."""
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    table = load_table(_write(tmp_path, TABLE))
    mnist = table.rows[0]
    fit = store.create_run(
        name="a", family="scornn", task="mnist", tags=[mnist.tag], main_metric="val/acc", main_metric_mode="max"
    )
    store.update_run(fit, info={"plan": {"total_steps": 300, "steps_per_epoch": 100, "max_epochs": 3}})
    for step, (val, test) in zip((99, 199), ((0.97, 0.979), (0.98, 0.976))):
        store.log_metrics(fit, {"val/acc": val, "test/acc": test}, step=step)
    item = reproductions(store, table)[0]
    assert item.value == pytest.approx(97.9) and item.measured_as == "test/acc"  # max over the epoch ends
    assert item.verdict == "not finished" and item.length == "199/300 steps, epoch 1/3"
    assert item.selected == pytest.approx(97.6)  # still running: the test point beside the best validation (step 199)
    store.log_metrics(fit, {"val/acc": 0.98, "test/acc": 0.978}, step=299)  # a tie: validation keeps the first best
    assert reproductions(store, table)[0].selected == pytest.approx(97.6)
    store.set_status(fit, "finished")
    test_run = store.create_run(name="a", stage="test", family="scornn", task="mnist", tags=[mnist.tag])
    store.log_metrics(test_run, {"test/acc": 0.975}, step=199)  # the checkpoint's own test run, once it exists
    store.set_status(test_run, "finished")
    item = reproductions(store, table)[0]
    assert item.value == pytest.approx(97.9) and item.selected == pytest.approx(97.5)
    assert item.verdict == "below"  # 97.9 against 98.1 printed to 0.1: more than half a unit (0.05) away


def test_a_fit_selecting_on_the_loss_reports_the_test_point_beside_its_lowest_validation_loss(tmp_path):
    """SRNN's Table 2 protocol (--select_on loss): before its test run exists, the value selected on validation
    is the test point beside the lowest validation loss, not beside the best validation accuracy."""
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    table = load_table(_write(tmp_path, TABLE))
    fit = store.create_run(
        name="a", family="scornn", task="mnist", tags=[table.rows[0].tag], main_metric="val/acc", main_metric_mode="max"
    )
    store.update_run(fit, info={"plan": {"total_steps": 300, "steps_per_epoch": 100, "max_epochs": 3}})
    for step, (loss, val, test) in zip((99, 199), ((0.10, 0.97, 0.979), (0.12, 0.98, 0.976))):
        store.log_metrics(fit, {"val/loss": loss, "val/acc": val, "test/acc": test}, step=step)
    assert reproductions(store, table)[0].selected == pytest.approx(97.6)  # on val/acc: step 199
    store.log_params(fit, {"select_on": "loss"})
    assert reproductions(store, table)[0].selected == pytest.approx(97.9)  # on val/loss: step 99


def test_a_setting_a_resume_changed_is_part_of_the_rows_status(tmp_path):
    """A fit continued with another setting (info['resumes'], db.SQLLogger) is not reported as if it had trained
    with one: its status names each changed key, its old value and the step it changed at."""
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    mnist = load_table(_write(tmp_path, TABLE)).rows[0]
    table = load_table(tmp_path / "demo_table9.yaml")
    fit = store.create_run(name="a", family="scornn", task="mnist", tags=[mnist.tag], main_metric="val/acc")
    store.log_metrics(fit, {"val/acc": 0.97}, step=99)
    store.set_status(fit, "finished")
    assert reproductions(store, table)[0].status == "finished"
    plain = {"step": 50, "stopped": "running", "changed": {}}
    eps = {"step": 60, "stopped": "failed", "changed": {"model.optimizers.default.eps": [0.0, 1e-10]}}
    store.update_run(fit, info={"resumes": [plain, eps]})
    expected = "finished; model.optimizers.default.eps 1e-10 (was 0.0) from step 60"
    assert reproductions(store, table)[0].status == expected


def test_a_rerun_in_progress_leaves_the_finished_run_in_the_report_and_is_named_beside_it(tmp_path):
    """A row's finished result stays shown (with its own test run) while a later fit of the row trains or stops."""
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    mnist = load_table(_write(tmp_path, TABLE)).rows[0]
    table = load_table(tmp_path / "demo_table9.yaml")

    def fit_and_test(best: float, tested: float | None):
        fit = store.create_run(
            name="a", family="scornn", task="mnist", tags=[mnist.tag], main_metric="val/acc", main_metric_mode="max"
        )
        store.log_metrics(fit, {"val/acc": best, "test/acc": best}, step=99)
        if tested is not None:
            store.set_status(fit, "finished")
            test = store.create_run(name="a", stage="test", family="scornn", task="mnist", tags=[mnist.tag])
            store.log_metrics(test, {"test/acc": tested}, step=99)
            store.set_status(test, "finished")
        return fit

    first = fit_and_test(0.97, 0.965)
    rerun = fit_and_test(0.50, None)  # a rerun, one epoch in
    item = reproductions(store, table)[0]
    assert item.fit.id == first and item.value == pytest.approx(97.0) and item.selected == pytest.approx(96.5)
    assert item.status == f"finished; rerun {rerun} running" and item.verdict == "below"
    store.set_status(rerun, "interrupted")
    assert reproductions(store, table)[0].status == f"finished; rerun {rerun} interrupted"
    store.set_status(rerun, "finished")  # finished, but its test run not yet made: the fit's own test points
    item = reproductions(store, table)[0]
    assert item.fit.id == rerun and item.evaluation is None and item.status == "finished"
    assert item.value == pytest.approx(50.0)


def _one_mnist_fit(tmp_path):
    """A store with one fit of the demo table's MNIST row, one point recorded: (store, table, fit id)."""
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    mnist = load_table(_write(tmp_path, TABLE)).rows[0]
    table = load_table(tmp_path / "demo_table9.yaml")
    fit = store.create_run(
        name="a", family="scornn", task="mnist", tags=[mnist.tag], main_metric="val/acc", main_metric_mode="max"
    )
    store.log_metrics(fit, {"val/acc": 0.5}, step=99)
    return store, table, fit


def test_a_running_row_that_stopped_writing_says_so(tmp_path, monkeypatch):
    """A fit killed outright (its machine gone) stays 'running' in the store; the report names its silence."""
    import datetime as dt

    store, table, fit = _one_mnist_fit(tmp_path)
    assert reproductions(store, table)[0].status == "running"  # just written

    from ortholab.db import store as store_module

    later = store_module.utcnow() + dt.timedelta(hours=3)
    monkeypatch.setattr(store_module, "utcnow", lambda: later)  # the store's clock (Store.clock), three hours on
    item = reproductions(store, table)[0]
    assert item.status == "running (silent 3.0 h: killed?)" and item.verdict == "not finished"


@pytest.mark.parametrize(
    "value, spread, tolerance",
    [
        (0.943, None, 0.0005),
        (98.1, None, 0.05),
        (3.22, None, 0.005),
        (5.3, 0.4, 0.4),
        (2e-05, None, 5e-06),
        (12, None, 0.5),
    ],
)
def test_a_published_value_agrees_within_its_spread_or_half_its_last_printed_digit(value, spread, tolerance):
    row = published.PaperRow(
        table="t",
        row="r",
        task="mnist",
        family="scornn",
        metric="test/acc",
        mode="max",
        scale=1.0,
        value=value,
        spread=spread,
    )
    assert row.tolerance == pytest.approx(tolerance)


def test_the_export_writes_tables_and_a_curve_plot_per_table(tmp_path):
    import numpy as np
    from matplotlib.image import imread

    from ortholab.app.export import export_report

    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    table = load_table(_write(tmp_path, TABLE))
    mnist, copy, _ = table.rows
    fit = store.create_run(
        name="a", family="scornn", task="mnist", tags=[mnist.tag], main_metric="val/acc", main_metric_mode="max"
    )
    for step, acc in enumerate([0.5, 0.93, 0.95]):
        store.log_metrics(fit, {"val/acc": acc, "test/acc": acc - 0.01}, step=step * 100)
    copy_run = store.create_run(
        name="b", family="lstm", task="copying", tags=[copy.tag], main_metric="val/loss", baseline=0.5
    )
    for step, loss in enumerate([0.6, 0.5, 0.49]):
        store.log_metrics(copy_run, {"val/loss": loss}, step=step * 100)
    store.update_run(fit, info={"code": [{"commit": "abc1234"}, {"commit": None, "ortholab": "0.2.0"}]})  # resumed
    written = export_report(store, {"demo_table9": table}, tmp_path / "out")
    assert sorted(p.name for p in written) == [
        "demo_table9.html",
        "demo_table9.png",
        "export.txt",
        "report.csv",
        "report.md",
        "runs.db",
    ]
    assert (tmp_path / "out" / "plotly.min.js").stat().st_size > 1e6  # the HTML opens offline
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert markdown.startswith("<!-- the runs behind these numbers: runs.db") and "| mnist_scornn_n8 |" in markdown
    assert (
        "trained by abc1234, an OrthoLab that did not record its code, ortholab 0.2.0;" in markdown.splitlines()[0]
    )  # the copying run recorded no code
    provenance = (tmp_path / "out" / "export.txt").read_text()
    assert provenance.startswith("written by `") and "\ncommit " in provenance and "runs: 1, 2 " in provenance
    csv_rows = (tmp_path / "out" / "report.csv").read_text().splitlines()
    assert csv_rows[0].startswith("table,kind,row,setting") and len(csv_rows) == 1 + len(table.rows) + 2  # 2 seeds
    assert any(line.startswith("demo_table9,row,mnist_scornn_n8,") and ",94," in line for line in csv_rows)
    assert any(line.startswith("demo_table9,seed,mnist_scornn_n8,") and ",abc1234," in line for line in csv_rows)
    assert any(
        line.startswith("demo_table9,seed,copy_lstm,") and "unknown: trained by an OrthoLab" in line
        for line in csv_rows
    )
    pixels = imread(tmp_path / "out" / "demo_table9.png")
    assert pixels.shape[0] > 300 and float(np.std(pixels[..., :3])) > 0.05  # drawn, not a blank canvas
    html = (tmp_path / "out" / "demo_table9.html").read_text()
    assert "mnist_scornn_n8 (run 1, test" in html and "copy_lstm (run 2, val" in html  # JSON escapes the slash
    assert '"xaxis2"' in html and '"xaxis3"' not in html  # a panel for the accuracy row, one for the loss row


def test_the_export_draws_one_panel_per_setting_as_the_papers_figures(tmp_path):
    from ortholab.app.export import export_report

    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    rows = [
        {
            "row": f"copying-T{t}_{family}",
            "task": "copying",
            "family": family,
            "setting": f"T={t}",
            "value": None,
            "outcome": "-",
            "expect": "below_baseline",
        }
        for t in (1000, 2000)
        for family in ("a", "b")
    ]
    table = load_table(_write(tmp_path, {**TABLE, "metric": "val/loss", "mode": "min", "scale": 1, "rows": rows}))
    for row in table.rows:
        run = store.create_run(name=row.row, tags=[row.tag], main_metric="val/loss", baseline=0.02)
        for step, loss in enumerate([0.5, 0.02, 1e-4]):
            store.log_metrics(run, {"val/loss": loss}, step=step * 100)
    export_report(store, {"fig": table}, tmp_path / "out")
    html = (tmp_path / "out" / "demo_table9.html").read_text()
    assert '"xaxis2"' in html and '"xaxis3"' not in html  # T = 1000 left, T = 2000 right
    assert html.index("T=1000") < html.index("T=2000") and '"type":"log"' in html  # losses over 3 decades
    export_report(
        store,
        {
            "fig": load_table(
                _write(tmp_path, {**TABLE, "metric": "val/loss", "mode": "min", "scale": 1, "rows": rows[:2]})
            )
        },
        tmp_path / "one",
    )
    assert '"xaxis2"' not in (tmp_path / "one" / "demo_table9.html").read_text()  # one setting: one panel


def test_exports_side_by_side_share_one_plotly_bundle_in_their_parent_folder(tmp_path, monkeypatch):
    """`--shared-plotly`: docs/results/* carried a 4.8 MB plotly.min.js each; shared, the HTML loads ../plotly.min.js,
    written once (again only when plotly's bundle differs), and no copy lands in the export folder."""
    from plotly.offline import get_plotlyjs

    from ortholab.app.export import export_report

    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    table = load_table(_write(tmp_path, TABLE))
    run = store.create_run(name="a", tags=[table.rows[0].tag], main_metric="val/acc", main_metric_mode="max")
    store.log_metrics(run, {"val/acc": 0.9, "test/acc": 0.89}, step=0)
    results = tmp_path / "results"
    first = export_report(store, {"t": table}, results / "one", shared_plotly=True)
    bundle = results / "plotly.min.js"
    assert bundle in first and bundle.read_text(encoding="utf-8") == get_plotlyjs()
    assert not (results / "one" / "plotly.min.js").exists()
    html = (results / "one" / "demo_table9.html").read_text()
    assert '<script charset="utf-8" src="../plotly.min.js"></script>' in html and "cdn" not in html.lower()
    second = export_report(store, {"t": table}, results / "two", shared_plotly=True)
    assert bundle not in second and not (results / "two" / "plotly.min.js").exists()  # the same bundle: kept
    bundle.write_text("stale", encoding="utf-8")
    assert bundle in export_report(store, {"t": table}, results / "two", shared_plotly=True)
    assert bundle.read_text(encoding="utf-8") == get_plotlyjs()  # another plotly's bundle: replaced
    with pytest.raises(TypeError, match="shared_plotly"):
        export_report(store, {"t": table}, results / "three", shared_plotly="yes")
    bundle.unlink()
    monkeypatch.chdir(results / "two")  # `--export .`: the bundle goes to the folder above, where ../ points
    assert export_report(store, {"t": table}, ".", shared_plotly=True)[0].resolve() == bundle.resolve()


def test_workers_run_rows_at_the_same_time_each_with_a_share_of_the_threads(tmp_path, monkeypatch, capsys):
    """`reproduce --workers 2`: both rows' processes run at once (each starts before the other ends), both runs
    finish, each child told to use half of the CPU's threads."""
    from test_cli import DEMO, TINY

    import ortholab.cli.children as children
    import ortholab.cli.reproduce as reproduce
    import ortholab.cli.reproduce_rows as reproduce_rows

    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", _copying_rows(DEMO, "first", "second")))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(reproduce.os, "cpu_count", lambda: 8)
    threads, spans = [], []
    real_run = children.run

    def run(cmd, env):  # each child: the threads it is told to use, and when it started and ended
        threads.append(env.get("OMP_NUM_THREADS"))
        start = time.monotonic()
        code = real_run(cmd, env)
        spans.append((start, time.monotonic()))
        return code

    monkeypatch.setattr(children, "run", run)
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["reproduce", "toy_figure1", "--workers", "2", "--db", db, *TINY])
    out = capsys.readouterr().out
    runs = Store(db).list_runs()
    assert sorted(r.name for r in runs) == ["toy_figure1.first", "toy_figure1.second"], out
    assert all(r.status == "finished" for r in runs), out
    assert len(spans) == 2 and max(start for start, _ in spans) < min(end for _, end in spans)  # at the same time
    assert threads == ["4", "4"] and reproduce_rows._child_threads is None
    with pytest.raises(SystemExit):
        main(["reproduce", "toy_figure1", "--workers", "0", "--db", db])
    assert "--workers 0: give a positive number" in capsys.readouterr().err


def test_resume_runs_the_evaluation_a_finished_fit_never_got(tmp_path, monkeypatch, capsys):
    """Two rows' fits finished but their test runs never ran (stopped between the two, or the fits resumed by
    hand): `reproduce --resume --workers 2` tests each best checkpoint, at the same time, without training again,
    once."""
    from test_cli import DEMO, TINY

    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("test/loss", _copying_rows(DEMO, "copy", "copy2")))
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    for name in ("copy", "copy2"):
        main(["fit", "--config", DEMO, *TINY, "--db", db, "--tags", f'["paper:toy_figure1/{name}"]'])
    store = Store(db)
    fits = store.list_runs()
    assert [r.status for r in fits] == ["finished", "finished"]
    capsys.readouterr()
    main(["reproduce", "--resume", "--workers", "2", "--db", db])
    out = capsys.readouterr().out
    assert all(f"paper:toy_figure1/{r.tags[0].rsplit('/', 1)[1]}: run {r.id} finished" in out for r in fits), out
    runs = store.list_runs()
    assert sorted((r.stage, r.status) for r in runs) == [("fit", "finished")] * 2 + [("test", "finished")] * 2
    assert [store.get_run(r.id).steps for r in fits] == [r.steps for r in fits]  # not trained again
    tests = [r for r in runs if r.stage == "test"]
    assert sorted(r.tags[0] for r in tests) == ["paper:toy_figure1/copy", "paper:toy_figure1/copy2"]
    assert all(store.metric_keys(r.id) for r in tests)
    main(["reproduce", "--resume", "--db", db])
    assert "no unfinished paper rows" in capsys.readouterr().out


def test_a_fit_that_never_validated_is_tested_from_its_last_checkpoint_not_untrained(tmp_path, monkeypatch, capsys):
    """A row's fit too short to validate keeps only checkpoints/last.ckpt: its test loads that file. It was given
    Lightning's `--ckpt_path last`, which in a new process loads nothing, so the test scored an untrained model at
    the config's seed, and every seed of the row showed the same value (walk-through: pMNIST at 40 steps). The test
    run records its fit's seed, not the config's."""
    from test_cli import DEMO, TINY

    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("test/loss", _copying_rows(DEMO, "copy")))
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    tags = ["--tags", '["paper:toy_figure1/copy"]']
    main(["fit", "--config", DEMO, *TINY, "--trainer.max_steps", "2", "--seed_everything", "7", "--db", db, *tags])
    store = Store(db)
    fit = store.get_run(store.list_runs()[0].id)
    held = sorted(p.name for p in (Path(fit.run_dir) / "checkpoints").iterdir())
    assert fit.status == "finished" and held == ["last.ckpt"], held
    main(["reproduce", "--resume", "--db", db])
    assert f"run {fit.id} finished" in capsys.readouterr().out
    test = store.get_run(next(r.id for r in store.list_runs() if r.stage == "test"))
    assert test.config["ckpt_path"] == str(Path(fit.run_dir) / "checkpoints" / "last.ckpt")
    assert test.config["seed_everything"] == 7  # the fit's seed, not the config's 5544: `runs --columns` shows it


def test_resume_with_rows_continues_only_those_rows(tmp_path, monkeypatch, capsys):
    """Two cores, three stopped rows: `reproduce --resume --rows NAME` continues that row alone and leaves the
    others stopped; a row id no table has is one clear error before anything runs; a row with nothing to resume
    is named, with the rows that have."""
    from test_cli import DEMO, TINY

    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("test/loss", _copying_rows(DEMO, "copy", "copy2")))
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    for name in ("copy", "copy2"):
        main(["fit", "--config", DEMO, *TINY, "--db", db, "--tags", f'["paper:toy_figure1/{name}"]'])
    store = Store(db)
    second = max(store.list_runs(), key=lambda r: r.id)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["reproduce", "--resume", "--rows", "copy3", "--db", db])
    assert "no published row is called 'copy3'" in capsys.readouterr().err
    main(["reproduce", "--resume", "--rows", "copy2", "--db", db])
    assert f"paper:toy_figure1/copy2: run {second.id} finished" in capsys.readouterr().out
    tests = [r for r in store.list_runs() if r.stage == "test"]
    assert [r.tags[0] for r in tests] == ["paper:toy_figure1/copy2"]  # the other row was left alone
    main(["reproduce", "--resume", "--rows", "copy2", "--db", db])
    captured = capsys.readouterr()
    assert "nothing to resume for copy2" in captured.err and "(unfinished rows: copy)" in captured.err, captured.err
    assert len([r for r in store.list_runs() if r.stage == "test"]) == 1


def test_resume_trains_anew_a_run_whose_folder_is_not_on_this_machine(tmp_path, monkeypatch, capsys):
    """An exported store's run that was still training (its folder and checkpoints left on the old machine) cannot
    be continued: `reproduce --resume` trains that row and seed anew as a new run instead of failing with `fit
    --resume`'s "no stored config" (as it did for the permuted-MNIST seed 5547 on 2026-11-29)."""
    import shutil

    config = yaml.safe_load((published.PUBLISHED_DIR.parents[1] / "demo" / "copying_scornn.yaml").read_text())
    config["model"]["hidden_size"], config["model"]["family_args"] = 8, {"rho": 4}
    config["data"]["init_args"].update(seq_len=5, batch_size=10, train_size=40, val_size=20, eval_batch_size=20)
    config["trainer"].update(max_steps=6, val_check_interval=3, enable_progress_bar=False)
    (tmp_path / "row.yaml").write_text(yaml.safe_dump(config))
    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", _copying_rows(str(tmp_path / "row.yaml"), "copy")))
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    tags = '["paper:toy_figure1/copy", "scale:full", "seed:7"]'
    main(["fit", "--config", str(tmp_path / "row.yaml"), "--db", db, "--tags", tags, "--seed_everything", "7"])
    store = Store(db)
    (lost,) = store.list_runs()
    store.set_status(lost.id, "interrupted", reason="SIGTERM at step 2")
    shutil.rmtree(store.get_run(lost.id).run_dir)
    capsys.readouterr()
    main(["reproduce", "--resume", "--rows", "copy", "--seeds", "7,", "--db", db])
    out = capsys.readouterr().out
    assert f"paper:toy_figure1/copy (seed 7): run {lost.id} has no checkpoint at " in out, out
    (new,) = [r for r in store.list_runs() if r.id != lost.id]
    assert f"paper:toy_figure1/copy (seed 7): run {new.id} finished" in out, out
    assert new.status == "finished" and {"scale:full", "seed:7"} <= set(new.tags)
    assert out.strip().splitlines()[-1] == "reproduce: 1 done, 0 failed, 0 skipped"  # seed 7 not trained twice


def test_resume_names_a_failed_row_with_its_reason_and_the_way_on(tmp_path, monkeypatch, capsys):
    """A row whose fit failed (the NaN guard) is not resumed as it was (it would fail the same way): --resume says
    so with the recorded reason and how to continue it with a changed setting, not "never started"."""
    from test_cli import DEMO, TINY

    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("test/loss", _copying_rows(DEMO, "copy", "copy2")))
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", db, "--tags", '["paper:toy_figure1/copy2"]'])
    store = Store(db)
    (fit,) = store.list_runs()
    store.set_status(fit.id, "failed", reason="non-finite parameters at step 3: lower model.optimizers.other.lr")
    capsys.readouterr()
    main(["reproduce", "--resume", "--rows", "copy,copy2", "--db", db])
    err = capsys.readouterr().err
    assert f"run {fit.id} failed, recorded up to step {fit.steps} (non-finite parameters at step 3: lower" in err
    assert f"`ortholab fit --resume {fit.id} --KEY VALUE`" in err and "`--again`" in err
    assert "nothing to resume for copy:" in err and "copy2:" not in err.split("nothing to resume")[1]
    assert store.get_run(fit.id).status == "failed"  # left as it was


def test_a_resumed_rows_evaluation_is_a_test_run_of_its_own(tmp_path, monkeypatch, capsys):
    """A fit continued by `reproduce --resume` is tested as a new test run: its run folder's config.yaml (written by
    the resume) does not name the fit, so the test points do not land in the fit's record at step 0."""
    from test_cli import DEMO, TINY

    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("test/loss", _copying_rows(DEMO, "copy")))
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(
        ["fit", "--config", DEMO, *TINY, "--trainer.max_steps", "3", "--db", db, "--tags", '["paper:toy_figure1/copy"]']
    )
    store = Store(db)
    fit = store.list_runs()[0]
    store.set_status(fit.id, "interrupted")  # as a stop between two validations leaves it
    main(["reproduce", "--resume", "--db", db, "--trainer.max_steps", "6"])  # once the 6 was read as the table
    assert f"run {fit.id} finished" in capsys.readouterr().out
    runs = store.list_runs()
    assert sorted((r.stage, r.status) for r in runs) == [("fit", "finished"), ("test", "finished")]
    assert store.get_run(fit.id).steps == 6 and "test/loss" not in store.metric_keys(fit.id)
    assert "test/loss" in store.metric_keys(next(r.id for r in runs if r.stage == "test"))
    stored = yaml.safe_load((Path(store.get_run(fit.id).run_dir) / "config.yaml").read_text())
    assert "resume" not in stored and stored["trainer"]["max_steps"] == 6  # the fit's own config, not the test's


def test_a_row_shows_the_run_of_its_twin_in_another_table(tmp_path, monkeypatch):
    """scoRNN's Figure 1 and scuRNN's Figure 4 both run the LSTM copying config: one run reproduces both rows,
    and the report says for which row it was recorded; a row with other flags is not a twin."""
    rows = _copying_rows("configs/x.yaml", "lstm", "lstm_T2000")
    rows[1]["args"] = ["--data.seq_len", "2000"]
    _use_tables(tmp_path, monkeypatch, first_figure1=_toy("val/loss", rows), second_figure4=_toy("val/loss", rows))
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    run = store.create_run(
        name="a",
        family="lstm",
        task="copying",
        tags=["paper:first_figure1/lstm"],
        main_metric="val/loss",
        baseline=0.02,
    )
    store.log_metrics(run, {"val/loss": 0.0201}, step=100)
    every = load_tables()
    first, second = (
        comparison_rows(reproductions(store, every[t], every)) for t in ("first_figure1", "second_figure4")
    )
    assert (first[0]["run"], first[0]["recorded_for"]) == (run, None)
    assert (second[0]["run"], second[0]["recorded_for"]) == (run, "first_figure1/lstm")
    assert second[0]["reproduced"].startswith("at baseline")
    assert second[1]["run"] is None and second[1]["status"] == "not yet run"  # other flags: another experiment
    assert "| first_figure1/lstm |" in markdown_report(store, {"second_figure4": every["second_figure4"]})
    own = store.create_run(
        name="b",
        family="lstm",
        task="copying",
        tags=["paper:second_figure4/lstm"],
        main_metric="val/loss",
        baseline=0.02,
    )
    store.log_metrics(own, {"val/loss": 0.001}, step=100)
    assert comparison_rows(reproductions(store, every["second_figure4"], every))[0]["run"] == own  # its own first


def test_estimate_times_a_step_plan_and_an_epoch_plan_without_touching_the_store(tmp_path, monkeypatch, capsys):
    """`reproduce --estimate`: a row planned in steps is timed over a stretch holding two validations, a row planned
    in epochs over 50 steps and one evaluation; the hours follow from the plan; the user's store is never made."""
    from test_cli import DEMO

    small = [
        "--model.hidden_size",
        "8",
        "--model.family_args",
        "{rho: 4}",
        "--data.seq_len",
        "5",
        "--data.train_size",
        "800",
        "--data.batch_size",
        "10",
        "--data.val_size",
        "20",
        "--data.eval_batch_size",
        "20",
    ]
    rows = _copying_rows(DEMO, "steps", "epochs") + [{"row": "none", "task": "adding", "family": "srnn", "value": None}]
    rows[0]["args"] = ["--trainer.max_steps", "40", "--trainer.val_check_interval", "10"]
    rows[1]["args"] = ["--trainer.max_steps", "-1", "--trainer.max_epochs", "3", "--trainer.val_check_interval", "1.0"]
    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", rows))
    monkeypatch.chdir(tmp_path)
    main(
        ["reproduce", "toy_figure1", "--estimate", "--seeds", "3", "--db", f"sqlite:///{tmp_path / 'mine.db'}", *small]
    )
    out, err = capsys.readouterr()
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("toy_figure1/")}
    # each timed row was also printed (stderr) as soon as it was timed, after its "timing" line and before the next
    assert (
        err.index("timing paper:toy_figure1/steps")
        < err.index("  toy_figure1/steps ")
        < err.index("timing paper:toy_figure1/epochs")
    )
    assert [line.split() for line in err.splitlines() if line.startswith("  toy_figure1/")] == [
        lines["toy_figure1/steps"],
        lines["toy_figure1/epochs"],
    ]
    steps, epochs = lines["toy_figure1/steps"], lines["toy_figure1/epochs"]
    assert " ".join(steps[1:6]) == "40 steps, validation every 10" and steps[7] == "s" and steps[8] == "-"
    # hours to 3 digits (0.00 said nothing), from a step printed to a millisecond: the two roundings add (approx
    # takes the larger of rel and abs, and a step of 9.49 ms printed 0.009 with hours 0.000106 missed by 4e-7)
    hours = float(steps[-1])  # half a ms a step, 40 steps; half a unit of the 3rd digit
    assert hours == pytest.approx(40 * float(steps[6]) / 3600, abs=40 * 0.0005 / 3600 + 0.005 * hours)
    assert " ".join(epochs[1:6]) == "3 epochs x 80 steps"  # 800 / 10 batches an epoch, of which 50 are timed
    step_s, evaluation_s = float(epochs[6]), float(epochs[8])
    assert evaluation_s >= 0 and float(epochs[-1]) == pytest.approx(3 * (80 * step_s + evaluation_s) / 3600, abs=0.006)
    assert "paper:toy_figure1/none: no config" in out
    # --seeds 3: each timed row three times over (the rows' hours as printed, each to 3 digits)
    (total,) = [line for line in out.splitlines() if line.startswith("with 3 seeds per row: ")]
    assert total.endswith(" hours in all, one run at a time"), total
    assert float(total.split()[5]) == pytest.approx(3 * (hours + float(epochs[-1])), rel=0.01)
    assert "a step: seconds a training step" in out and out.strip().splitlines()[-1] == (
        "reproduce: 2 timed, 0 failed, 1 skipped"  # nothing was trained: its rows were timed
    )
    assert not (tmp_path / "mine.db").exists() and not (tmp_path / "runs").exists()  # nothing recorded
    for other in (["--resume"], ["--scale", "cpu-smoke"]):
        with pytest.raises(SystemExit):
            main(["reproduce", "toy_figure1", "--estimate", *other])
        assert "--estimate times the rows at the paper's settings" in capsys.readouterr().err


@pytest.mark.parametrize(
    "interval, every, expected",
    [(None, None, 1), (1.0, None, 1), (0.25, None, 4), (1.0, 2, 0.5), (300, None, 3), (5000, 1, 1), (0.5, "null", 2)],
)
def test_evaluations_an_epoch_follow_lightnings_schedule(interval, every, expected):
    from ortholab.cli.estimate import evaluations_per_epoch

    assert evaluations_per_epoch(interval, every, steps_per_epoch=1100) == expected  # counts: exact


def test_an_estimate_timed_beside_other_work_with_too_many_threads_says_so(monkeypatch):
    from ortholab.cli.estimate import oversubscribed, render

    assert oversubscribed(busy=1.0, threads=2, cores=2).endswith("e.g. OMP_NUM_THREADS=1")
    assert "about 1.0 of the 2 cores busy" in oversubscribed(busy=1.0, threads=2, cores=2)
    assert oversubscribed(busy=1.0, threads=1, cores=2) is None  # one thread on the core left
    assert oversubscribed(busy=0.1, threads=2, cores=2) is None  # a quiet machine
    alone = oversubscribed(busy=3.0, threads=1, cores=2)  # nothing free: even one thread waits
    assert "upper bound" in alone and "OMP_NUM_THREADS" not in alone  # no advice already followed
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice: timed oversubscribed, and told so
    assert render([], busy=1.0).splitlines()[-1].startswith("other work kept about 1.0 of the 2 cores busy")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    said = render([], busy=1.0)
    assert "oversubscribed" not in said and "other work on 1.0 cores when timing began" in said
    monkeypatch.delenv("OMP_NUM_THREADS")  # unset: each timing fit took the free core, as the rows' fits will
    said = render([], busy=1.0)
    assert "oversubscribed" not in said and "(1 torch thread: the cores other work left free)" in said
    assert "(torch default threads)" in render([], busy=0.1)  # a quiet machine: a thread per core
    assert "oversubscribed" not in render([])  # no other work measured (a platform with neither source)


def test_full_scale_runs_inside_a_checkout_get_a_note_on_where_to_keep_them(tmp_path, monkeypatch):
    """Hours of runs in ./runs of a git checkout are lost to a fresh clone: reproduce names $ORTHOLAB_RUNS then,
    and is silent once a store or a runs root outside is named."""
    from ortholab.cli.reproduce import checkout_hint

    checkout = tmp_path / "clone"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "sub").mkdir()
    monkeypatch.delenv("ORTHOLAB_DB", raising=False)
    monkeypatch.delenv("ORTHOLAB_RUNS", raising=False)
    monkeypatch.chdir(checkout / "sub")
    assert "ORTHOLAB_RUNS" in checkout_hint(None, []) and str(checkout / "sub" / "runs") in checkout_hint(None, [])
    assert checkout_hint("sqlite:////elsewhere/x.db", []) is None
    assert checkout_hint(None, ["--runs_dir", "/elsewhere"]) is None
    monkeypatch.setenv("ORTHOLAB_RUNS", str(tmp_path / "kept"))
    assert checkout_hint(None, []) is None
    monkeypatch.delenv("ORTHOLAB_RUNS")
    monkeypatch.chdir(tmp_path)  # not a checkout
    assert checkout_hint(None, []) is None


def test_a_row_stopped_by_sigterm_says_how_to_continue_it_and_other_exits_say_failed(tmp_path, monkeypatch):
    from ortholab.cli.reproduce import fit_failed
    from ortholab.db.published import PaperRow

    row = PaperRow("scornn_figure1", "copying-T1000_fcurnn_n128", "copying", "fcurnn", "val/loss", "min", 1.0)
    monkeypatch.delenv("ORTHOLAB_DB", raising=False)
    monkeypatch.setenv("ORTHOLAB_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr("ortholab.cli.reproduce_rows._seeds_given", None)  # no --seeds (an earlier reproduce set some)
    stopped = fit_failed("paper:x (seed 1)", 143, row, None, [])
    assert stopped.state == "stopped" and stopped.line == (
        "paper:x (seed 1): fit stopped by SIGTERM with a checkpoint; continue it with "
        "`ortholab reproduce scornn_figure1 --resume --rows copying-T1000_fcurnn_n128`"
    )
    # its store and flags too: the hint without them continued nothing (another store) or, where the run had no
    # checkpoint, trained the paper's full-size row anew
    other = f"sqlite:///{tmp_path / 'other.db'}"
    flags = ["--model.hidden_size", "8", "--data.val_size", "100"]
    assert fit_failed("r", 143, row, other, flags).line.endswith(
        f"--rows copying-T1000_fcurnn_n128 --db '{other}' --model.hidden_size 8 --data.val_size 100`"
    )
    assert "resuming run 7 stopped by Ctrl-C" in fit_failed("r", 130, row, None, [], what="resuming run 7").line
    # and the command's seeds: the hint without them continued one seed and left the others untrained, unsaid
    for seeds, flag in ((3, "--seeds 3"), ([4, 5], "--seeds 4,5"), ([7], "--seeds 7,")):
        monkeypatch.setattr("ortholab.cli.reproduce_rows._seeds_given", seeds)
        assert fit_failed("r", 130, row, None, ["--trainer.max_steps", "9"]).line.endswith(
            f"--rows copying-T1000_fcurnn_n128 {flag} --trainer.max_steps 9`"
        )
    assert fit_failed("r", 2, row, None, []).line == "r: fit failed (exit 2)"


def test_a_child_killed_by_a_signal_is_named_and_sigkill_points_at_the_memory_killer():
    """A killed child returns minus the signal (subprocess's convention): a real process killed by SIGKILL, as
    Linux's out-of-memory killer does, reads as that and not as a bare "exit -9"."""
    import signal
    import subprocess
    import sys

    from ortholab.cli.common import exit_reason
    from ortholab.cli.reproduce import fit_failed
    from ortholab.db.published import PaperRow

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.send_signal(signal.SIGKILL)
    code = child.wait(timeout=30)
    row = PaperRow("scurnn_figure5", "adding-T750_urnn_n950", "adding", "urnn", "val/loss", "min", 1.0)
    assert code == -9 and fit_failed("r", code, row, None, []).line == (
        "r: fit failed (killed by SIGKILL, most often the out-of-memory killer: `dmesg` names it)"
    )
    assert exit_reason(-signal.SIGSEGV) == "killed by SIGSEGV" and exit_reason(0) == "exit 0"


def test_a_failed_row_says_why_in_its_status(tmp_path):
    """The report's status of a failed fit carries the first clause of its recorded reason (the NaN guard's)."""
    store, table, fit = _one_mnist_fit(tmp_path)
    reason = (
        "non-finite gradient of parameter group 'recurrent' at step 443: gradients of group 'recurrent' overflowed: "
        "lower model.optimizers.recurrent.lr (checkpoint before the step: /x/nan-step443.ckpt)"
    )
    store.set_status(fit, "failed", reason=reason)
    item = reproductions(store, table)[0]
    assert item.status == "failed (non-finite gradient of parameter group 'recurrent' at step 443)"
    store.set_status(fit, "failed", reason="out of memory (checkpoint before the step: /x/y.ckpt)")
    assert reproductions(store, table)[0].status == "failed (out of memory)"


def test_resume_finds_at_once_a_running_row_whose_process_here_has_ended(tmp_path, monkeypatch):
    """SIGKILL (most often the out-of-memory killer) leaves a run 'running'. When its lease names a process of this
    machine that has ended, `reproduce --resume` continues it at once; a live holder's run and a run written from
    another machine, both silent for seconds only, are left alone until --stale_minutes says otherwise."""
    import subprocess
    import sys

    from test_cli import DEMO

    from ortholab.cli.reproduce import unfinished_runs
    from ortholab.db.lease import current_owner

    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", _copying_rows(DEMO, "ended", "live", "elsewhere")))
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    script = "from ortholab.db.lease import current_owner; print(current_owner().token)"
    ended = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    here = current_owner().token
    elsewhere = "|".join(["another-host", *here.split("|")[1:]])
    ids = {
        name: store.create_run(name=name, tags=[f"paper:toy_figure1/{name}"], owner=token)
        for name, token in (("ended", ended), ("live", here), ("elsewhere", elsewhere))
    }
    assert store.holder_ended(ids["ended"]) and not store.holder_ended(ids["live"])
    assert not store.holder_ended(ids["elsewhere"])
    assert [(row.row, fit.id) for row, fit in unfinished_runs(store, 1800)] == [("ended", ids["ended"])]
    assert [row.row for row, _ in unfinished_runs(store, 0)] == ["ended", "live", "elsewhere"]


def test_a_run_given_other_flags_or_at_smoke_scale_neither_stands_for_the_row_nor_blocks_its_paper_run(
    tmp_path, monkeypatch, capsys
):
    """A shortened run (`reproduce --trainer.max_steps 20`) or a smoke run is another experiment: the report shows the
    row's run at the paper's settings, or, where it has none, the latest other run alone and says with which flags;
    the paper's own command trains the row anew instead of skipping it, and the same flags again do skip it."""
    import ortholab.cli.reproduce as reproduce

    config = tmp_path / "row.yaml"
    config.write_text("seed_everything: 5544\n")
    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", _copying_rows(str(config), "copy", "short_only")))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(db)

    def recorded(row: str, tags: list[str], value: float) -> int:
        tags = [f"paper:toy_figure1/{row}", "seed:5544", *tags]
        run = store.create_run(name=row, family="scornn", task="copying", tags=tags, main_metric="val/loss")
        store.log_metrics(run, {"val/loss": value}, step=100)
        store.set_status(run, "finished")
        return run

    paper = recorded("copy", ["scale:full"], 0.001)
    recorded("copy", ["scale:cpu-smoke"], 0.03)
    recorded("copy", ["scale:full", "flags:--trainer.max_steps 20"], 0.02)
    recorded("short_only", ["scale:cpu-smoke"], 0.03)
    short = recorded("short_only", ["scale:full", "flags:--trainer.max_steps 20"], 0.02)
    every = load_tables()
    copy, short_only = comparison_rows(reproductions(store, every["toy_figure1"], every))
    assert (copy["run"], copy["scale"], copy["status"]) == (paper, "full", "finished")
    assert copy["reproduced"] == "0.001" and copy["seeds"].startswith("1 seed")
    assert (short_only["run"], short_only["status"]) == (short, "finished; with --trainer.max_steps 20")
    assert short_only["seeds"].startswith("1 seed")  # the smoke run of the same seed is not a second one

    trained = []
    monkeypatch.setattr(reproduce, "run_row", lambda row, scale, db, extra, seed: trained.append(row.row) or None)
    monkeypatch.setattr(reproduce, "run_each", lambda work, items, workers: [work(item) for item in items])
    reproduce.reproduce("toy_figure1", None, "full", db, [])  # the paper's settings: short_only has no run there
    assert trained == ["short_only"]
    out = capsys.readouterr().out
    assert f"paper:toy_figure1/copy (seed 5544): skipped, run {paper} finished" in out
    trained.clear()
    reproduce.reproduce("toy_figure1", None, "full", db, ["--trainer.max_steps=20", "--data.path", "/data"])
    assert trained == []  # the same experiment flags (written either way; --data.path only says where): both done
    reproduce.reproduce("toy_figure1", None, "full", db, ["--model.hidden_size", "100"])
    assert trained == ["copy", "short_only"]


def _another_process_finishes(store: Store, row: str) -> int:
    """A finished fit of toy_figure1's `row` (seed 5544, full scale), as another `reproduce` would record it."""
    tags = [f"paper:toy_figure1/{row}", "seed:5544", "scale:full"]
    run = store.create_run(name=row, family="scornn", task="copying", tags=tags, main_metric="val/loss")
    store.log_metrics(run, {"val/loss": 0.001}, step=100)
    store.set_status(run, "finished")
    return run


def test_a_row_trained_by_another_process_meanwhile_is_skipped_not_trained_twice(tmp_path, monkeypatch, capsys):
    """Two `reproduce` commands over the same rows (two terminals, two machines on one store): each row is looked up
    in the store again just before it trains, so a row the other command trained meanwhile is skipped. Before, the
    plan made at the start stood, and a row the other command had finished since was trained a second time."""
    import ortholab.cli.reproduce as reproduce

    config = tmp_path / "row.yaml"
    config.write_text("seed_everything: 5544\n")
    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", _copying_rows(str(config), "first", "second")))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    trained, other = [], {}

    def run_row(row, scale, db, extra, seed):
        trained.append(row.row)
        if row.row == "first":  # while this row trains, the other command finishes the second
            other["second"] = _another_process_finishes(Store(db), "second")
        return reproduce.Outcome(f"{row.tag}: trained")

    monkeypatch.setattr(reproduce, "run_row", run_row)
    outcomes = reproduce.reproduce("toy_figure1", None, "full", db, [])
    assert trained == ["first"] and [o.state for o in outcomes] == ["done", "skipped"]
    skipped = f"paper:toy_figure1/second (seed 5544): skipped, run {other['second']} finished"
    assert capsys.readouterr().out.count(skipped) == 1


def test_a_stopped_row_resumed_by_another_process_meanwhile_is_skipped_by_resume(tmp_path, monkeypatch, capsys):
    """`reproduce --resume` lists the stopped rows once, then takes them one by one: a row whose listed run another
    command has since replaced by a finished one is skipped, not trained anew beside it."""
    import ortholab.cli.reproduce as reproduce
    import ortholab.cli.reproduce_resume as reproduce_resume

    config = tmp_path / "row.yaml"
    config.write_text("seed_everything: 5544\n")
    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", _copying_rows(str(config), "first", "second")))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    store, stopped = Store(db), {}
    for row in ("first", "second"):  # stopped with their machine: no checkpoint here, so each is trained anew
        tags = [f"paper:toy_figure1/{row}", "seed:5544", "scale:full"]
        stopped[row] = store.create_run(name=row, family="scornn", task="copying", tags=tags, main_metric="val/loss")
        store.set_status(stopped[row], "interrupted")
    trained = []

    def run_row(row, scale, db, extra, seed):
        trained.append(row.row)
        if row.row == "first":
            _another_process_finishes(Store(db), "second")
        return reproduce.Outcome(f"{row.tag}: trained")

    monkeypatch.setattr(reproduce_resume, "run_row", run_row)  # where resume_unfinished calls it
    outcomes = reproduce.resume_unfinished(db, 1800.0, [], table="toy_figure1")
    assert trained == ["first"] and [o.state for o in outcomes] == ["done", "skipped"]
    skipped = (
        f"paper:toy_figure1/second (seed 5544): skipped, trained or being trained by another process since run "
        f"{stopped['second']} was listed"
    )
    assert capsys.readouterr().out.count(skipped) == 1


def test_experiment_flags_leave_out_those_that_only_say_where_a_row_runs():
    from ortholab.cli.reproduce import experiment_flags

    assert experiment_flags([]) is None
    assert experiment_flags(["--data.path", "/d", "--trainer.accelerator=gpu", "--runs_dir", "r"]) is None
    given = ["--trainer.max_steps=20", "--data.path", "/d", "--model.optimizers", "{default: {lr: 1}}"]
    assert experiment_flags(given) == "--trainer.max_steps 20 --model.optimizers {default: {lr: 1}}"


def test_a_mistyped_flag_for_every_row_is_one_line_before_any_row_trains(tmp_path, monkeypatch, capsys):
    """`reproduce TABLE --model.hiden_size 3` started a fit per row, each failing with the same message (9 failures
    in 41 s for scoRNN's Figure 1): the flags are read once, first."""
    from test_cli import DEMO

    rows = _copying_rows(DEMO, "one", "two")
    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", rows))
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "runs.db"
    with pytest.raises(SystemExit) as stopped:
        main(["reproduce", "toy_figure1", "--db", f"sqlite:///{db}", "--model.hiden_size", "3"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean model.hidden_size?" in err and "no row was trained" in err
    assert not db.exists()


def test_a_flag_one_familys_rows_do_not_take_is_one_line_before_any_row_trains(tmp_path, monkeypatch, capsys):
    """The flags were read with the first row's config alone: `--model.family_args.rho 8` for a scoRNN and an LSTM
    row trained the scoRNN's seeds, then failed each LSTM fit. They are read with a row of each family and task."""
    from test_cli import DEMO, REPO

    lstm = {"row": "copy_lstm", "task": "copying", "family": "lstm", "value": None}
    rows = [*_copying_rows(DEMO, "one"), {**lstm, "config": str(REPO / "configs/papers/lstm_copying_T1000.yaml")}]
    _use_tables(tmp_path, monkeypatch, toy_figure1=_toy("val/loss", rows))
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "runs.db"
    with pytest.raises(SystemExit) as stopped:
        main(["reproduce", "toy_figure1", "--db", f"sqlite:///{db}", "--model.family_args.rho", "8"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.family_args.rho" in err and "family 'lstm'" in err, err
    assert "read with row paper:toy_figure1/copy_lstm's config; no row was trained" in err and not db.exists()


@pytest.mark.parametrize("estimate", [False, True])
def test_a_tasks_data_not_there_is_one_line_before_any_row_trains(tmp_path, monkeypatch, capsys, estimate):
    """`reproduce scornn_table2_val` without --data.path failed each of its 12 rows with the same 'data.path is not
    set', and exited 1 (walk-through of the audio tasks); `--estimate` too. Rows of tasks that check their data are
    read first, with no flag given; rows of tasks that do not (copying) are not read at all."""
    from test_cli import DEMO, REPO

    timit = {"row": "timit", "task": "speech", "family": "scornn", "value": 1.0}
    rows = [*_copying_rows(DEMO, "one"), {**timit, "config": str(REPO / "configs/papers/scornn_timit_n224.yaml")}]
    _use_tables(tmp_path, monkeypatch, toy_table2=_toy("val/mse", rows))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORTHOLAB_RUNS", str(tmp_path / "runs"))
    import ortholab.cli.children as children

    read = []
    reading = children.read_fit_args
    monkeypatch.setattr(children, "read_fit_args", lambda argv, *a, **k: read.append(argv[1]) or reading(argv, *a, **k))
    db = tmp_path / "runs.db"
    with pytest.raises(SystemExit) as stopped:
        main(["reproduce", "toy_table2", "--db", f"sqlite:///{db}", *["--estimate"] * estimate])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ortholab: error: data.path is not set: give TIMIT's folder")
    assert "(row paper:toy_table2/timit's data, read as its fit would; no row was trained)" in err
    assert not db.exists()
    assert read == [str(REPO / "configs/papers/scornn_timit_n224.yaml")]  # without flags the copying row is not read


def test_an_estimate_reads_and_keeps_the_feature_cache_real_runs_share(tmp_path, monkeypatch):
    """A relative data.cache_dir lies under the runs folder; the timing run's runs folder is a temporary one, so
    the estimate passes the shared cache (under $ORTHOLAB_RUNS), or it would compute TIMIT's features every time
    and throw them away (review of stop 71)."""
    from ortholab.cli.estimate import estimate_row
    from ortholab.db.published import PaperRow

    monkeypatch.setenv("ORTHOLAB_RUNS", str(tmp_path / "kept"))
    config = tmp_path / "speech.yaml"
    config.write_text("data:\n  class_path: datamodules.SpeechPrediction\n  init_args: {cache_dir: cache/speech}\n")
    row = PaperRow(table="t", row="r", task="speech", family="scornn", metric="val/mse", mode="min", scale=1.0)
    given = []
    assert "failed" in estimate_row(row, config, [], lambda args, db: given.append(args) or 1)
    (args,) = given
    assert args[args.index("--data.cache_dir") + 1] == str(tmp_path / "kept" / "cache" / "speech")
    config.write_text("data:\n  init_args: {cache_dir: /abs/cache}\n")  # an absolute one is left as it is
    estimate_row(row, config, [], lambda args, db: given.append(args) or 1)
    assert "--data.cache_dir" not in given[-1]


def test_a_row_stopped_by_a_signal_is_counted_stopped_not_failed():
    """A fit stopped by Ctrl-C or SIGTERM wrote its checkpoint and `--resume` continues it: the summary scripts read
    says so apart from a failure (the exit code is still 1: the row is not done)."""
    from ortholab.cli.reproduce import Outcome, fit_failed, summary

    row = published.PaperRow("scornn_figure1", "copying-T1000_fcurnn_n128", "copying", "fcurnn", "val/loss", "min", 1.0)
    assert fit_failed("row", 130, row, None, []).state == "stopped"
    assert fit_failed("row", 1, row, None, []).state == "failed"
    outcomes = [Outcome("a"), Outcome("b", "stopped"), Outcome("c", "skipped")]
    assert summary(outcomes) == "reproduce: 1 done, 0 failed, 1 skipped, 1 stopped"
    assert summary(outcomes[:1]) == "reproduce: 1 done, 0 failed, 0 skipped"  # the line as it always was


def test_an_unwritable_runs_folder_is_one_line_before_any_row(tmp_path, monkeypatch):
    """Each row and seed once failed on it in turn (about 10 s each), naming a --runs_dir nobody gave."""
    from ortholab.cli.reproduce import reproduce
    from ortholab.errors import ConfigError

    (tmp_path / "afile").write_text("")
    monkeypatch.delenv("ORTHOLAB_DB", raising=False)
    monkeypatch.setenv("ORTHOLAB_RUNS", str(tmp_path / "afile" / "runs"))
    with pytest.raises(ConfigError, match=r"^\$ORTHOLAB_RUNS .*afile/runs: cannot write run folders there"):
        reproduce("cpu_checks", ["copying-T100_lstm_n68"], "full", None, [], seeds=2)
    given = ["--runs_dir", str(tmp_path / "afile" / "other")]
    with pytest.raises(ConfigError, match=r"^--runs_dir .*afile/other: cannot write run folders there"):
        reproduce("cpu_checks", ["copying-T100_lstm_n68"], "full", f"sqlite:///{tmp_path / 'r.db'}", given)
    assert not (tmp_path / "r.db").exists()


def test_a_smoke_run_shrinks_the_splits_of_generated_tasks_only():
    """`--scale cpu-smoke`: copying and adding draw their splits to any size (TaskDataModule.generated_splits), so
    the smoke run draws SMOKE_STEPS batches; a task read from files keeps its data."""
    from ortholab.cli.reproduce import SMOKE_STEPS, smoke_overrides

    def flags(class_path):
        given = smoke_overrides({"data": {"class_path": class_path, "init_args": {"batch_size": 20}}})
        return dict(zip(given[::2], given[1::2]))

    for task in ("datamodules.CopyingTask", "ortholab.datamodules.AddingTask"):
        assert flags(task)["--data.train_size"] == str(SMOKE_STEPS * 20) and flags(task)["--data.val_size"] == "200"
    assert "--data.train_size" not in flags("datamodules.PixelMNIST")
