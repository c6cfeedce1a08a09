"""Progress where stdout is no terminal (a log file, a job scheduler, `docker logs`): plain lines, not a bar that
shows nothing until the run ends."""

import re

from test_cli import DEMO, TINY

from ortholab.cli.main import main
from ortholab.db import Store
from ortholab.training.progress import PlainProgress, _clock

LINE = re.compile(r"^step (\d+)/6 · loss [\d.e+-]+ · (?:[\d.e+-]+ steps/s · )?(ETA \S+|training ended after \S+)$")


def _fit(tmp_path, *extra):
    db = f"sqlite:///{tmp_path / 'store.db'}"
    at = TINY.index("--trainer.enable_progress_bar")
    flags = TINY[:at] + TINY[at + 2 :]  # the default: a progress view
    main(["fit", "--config", DEMO, *flags, "--db", db, "--runs_dir", str(tmp_path / "runs"), *extra])
    return Store(db)


def test_a_run_without_a_terminal_prints_plain_lines(tmp_path, capsys):
    _fit(tmp_path)  # captured stdout is no terminal
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(lines) >= 2 and all(LINE.match(line) for line in lines), lines
    assert LINE.match(lines[0]).group(1) == "1" and lines[0].endswith("ETA estimating…")  # at once after step 1
    assert lines[-1].startswith("step 6/6") and "training ended after" in lines[-1]
    assert [line for line in lines if line.startswith("step 6/6")] == lines[-1:]  # the last step said once


def test_the_last_step_is_said_once_even_where_every_n_steps_falls_on_it(capsys):
    from types import SimpleNamespace

    trainer = SimpleNamespace(global_step=0, estimated_stepping_batches=6, is_global_zero=True, callback_metrics={})
    progress = PlainProgress(every_s=3600, every_n_steps=3)
    progress.on_train_start(trainer, None)
    for step in range(1, 7):
        trainer.global_step = step
        progress.on_train_batch_end(trainer, None, None, None, step - 1)
    progress.on_train_end(trainer, None)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" · ")[0] for line in lines] == ["step 1/6", "step 3/6", "step 6/6"], lines
    assert "training ended after" in lines[-1]


def test_the_eta_leaves_out_the_first_steps_warm_up(monkeypatch, capsys):
    """The first step (compilation, warm-up: 30 s here, then 0.1 s a step) made the ETA ~30 times too long: its line
    says the ETA is being estimated; later lines measure the pace from the end of the first step."""
    from types import SimpleNamespace

    from ortholab.training import progress as progress_module

    clock = [0.0]
    monkeypatch.setattr(progress_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    trainer = SimpleNamespace(global_step=0, estimated_stepping_batches=1000, is_global_zero=True, callback_metrics={})
    progress = PlainProgress(every_s=3600, every_n_steps=10)
    progress.on_train_start(trainer, None)
    for step in range(1, 11):
        clock[0] = 30.0 + (step - 1) * 0.1  # step 1 ends at 30 s, each later one 0.1 s after
        trainer.global_step = step
        progress.on_train_batch_end(trainer, None, None, None, step - 1)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["step 1/1000 · ETA estimating…", "step 10/1000 · 10 steps/s · ETA 1m39s"], lines  # 990 x 0.1 s


def test_every_n_steps_adds_lines_and_bad_intervals_are_named():
    progress = PlainProgress(every_s=3600, every_n_steps=2)
    assert progress.every_n_steps == 2
    for bad in ({"every_s": -1}, {"every_n_steps": 0}):
        try:
            PlainProgress(**bad)
        except ValueError as err:
            assert "every_s" in str(err)
        else:
            raise AssertionError(bad)


def test_the_clock_reads_as_a_person_would():
    assert [_clock(s) for s in (7, 756, 3720)] == ["7s", "12m36s", "1h02m"]
