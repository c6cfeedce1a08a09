"""`ortholab runs --sort KEY [--desc]`: the runs ordered by a column or a --columns key, runs without a value last,
an unknown key one line naming the nearest (a known gap: the listing was newest first only)."""

import json

import pytest

from ortholab.cli.main import main
from ortholab.db import Store


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(url)
    for name, best, seq_len in (("b", 0.5, 20), ("a", None, 5), ("c", 0.25, 100)):
        run = store.create_run(name=name, family="lstm", task="copying")
        store.update_run(run, main_metric="val/loss", main_metric_mode="min")
        if best is not None:  # best: the main metric's lowest point
            store.log_metrics(run, {"val/loss": best}, step=1)
        store.log_params(run, {"data": {"seq_len": seq_len}})
    return url


def _names(db, capsys, *args) -> list[str]:
    capsys.readouterr()
    main(["runs", "--db", db, "--json", *args])
    return [row["name"] for row in json.loads(capsys.readouterr().out)]


def test_runs_sort_by_a_column_or_a_columns_key_either_way(db, capsys):
    assert _names(db, capsys) == ["c", "a", "b"]  # the default: newest first
    assert _names(db, capsys, "--sort", "name") == ["a", "b", "c"]
    assert _names(db, capsys, "--sort", "best") == ["c", "b", "a"]  # a run without a best value last
    assert _names(db, capsys, "--sort", "best", "--desc") == ["b", "c", "a"]  # last either way
    assert _names(db, capsys, "--sort", "data.seq_len", "--columns", "data.seq_len") == ["a", "b", "c"]  # 5 < 20
    main(["runs", "--db", db, "--sort", "id", "--desc"])
    lines = capsys.readouterr().out.splitlines()[2:]
    assert [line.split()[0] for line in lines] == ["3", "2", "1"]


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--sort", "bset"], "--sort bset: no such column; did you mean 'best'? sort by one of id, name, "),
        (["--sort", "data.seq_len"], "--sort data.seq_len: no such column; "),  # a --columns key given to --columns
        (["--desc"], "--desc orders a --sort: give --sort KEY"),
    ],
)
def test_an_unknown_sort_key_is_one_line_naming_the_nearest(db, capsys, args, expected):
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "--db", db, *args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and expected in err and "Traceback" not in err, err


def test_runs_sort_orders_numbers_written_as_text_by_their_value(tmp_path, capsys):
    """`--sort epoch` ordered the 'k/N' text lexically ('10/10' before '3/10'); a --columns value recorded as text
    ('1e-3', a YAML float PyYAML reads as a string) likewise ('1e-3' after '0.01')."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(url)
    for name, steps, lr in (("three", 300, "0.01"), ("ten", 1_000, "1e-3"), ("nine", 900, "5e-2")):
        run = store.create_run(name=name, family="lstm", task="copying")
        store.update_run(run, info={"plan": {"total_steps": 1_000, "steps_per_epoch": 100, "max_epochs": 10}})
        store.log_metrics(run, {"time/step_s": 0.5}, step=steps)
        store.log_params(run, {"model": {"lr": lr}})
    assert _names(url, capsys, "--sort", "epoch") == ["three", "nine", "ten"]  # 3/10 < 9/10 < 10/10
    assert _names(url, capsys, "--sort", "epoch", "--desc") == ["ten", "nine", "three"]
    assert _names(url, capsys, "--sort", "model.lr", "--columns", "model.lr") == ["ten", "three", "nine"]
