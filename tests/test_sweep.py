"""`ortholab sweep` with two workers on a tiny space: every trial recorded once, tagged, and the best reported."""

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import optuna
import pytest
from test_cli import DEMO, TINY

from ortholab.db import Store


@pytest.mark.slow
def test_two_workers_share_one_grid_sweep(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("model.hidden_size: [4, 6]\nmodel.optimizers.other.lr: [0.001, 0.01]\n")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ortholab.cli.main import main; main()",
            "sweep",
            "--config",
            DEMO,
            "--space",
            str(space),
            "--trials",
            "4",
            "--workers",
            "2",
            "--sampler",
            "grid",
            "--name",
            "tiny",
            "--db",
            db,
            *TINY,
            "--analysis",
            "false",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [r for r in Store(db).list_runs() if "sweep:tiny" in r.tags]
    assert len(runs) == 4 and all(r.status == "finished" for r in runs)
    trials = Counter(tag for r in runs for tag in r.tags if tag.startswith("trial:"))
    assert sorted(trials) == ["trial:0", "trial:1", "trial:2", "trial:3"] and set(trials.values()) == {1}
    study = optuna.load_study(study_name="tiny", storage=db)
    grid = {(t.params["model.hidden_size"], t.params["model.optimizers.other.lr"]) for t in study.trials}
    assert grid == {(4, 0.001), (4, 0.01), (6, 0.001), (6, 0.01)}  # the whole grid, each point once
    best = min(runs, key=lambda r: r.best)
    assert f"best run {best.id} " in done.stdout and "4 trials completed" in done.stdout
    summaries = [line for line in done.stdout.splitlines() if line.startswith("sweep: ")]
    assert summaries == [done.stdout.strip().splitlines()[-1]], done.stdout  # the worker's own is not printed
    assert sorted(line.split(" is run ")[0] for line in done.stdout.splitlines() if " is run " in line) == [
        f"sweep tiny: trial {k}" for k in range(4)
    ]  # each trial's line, from whichever worker trained it
    assert "[I " not in done.stderr  # Optuna's info lines: ours say each trial


# the space file and the trials' processes, without training (fast) -------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ('model.hidden_size: !!python/object/apply:os.system ["touch pwned"]\n', "not valid YAML at line 1"),
        ("", "holds nothing"),
        ("- model.hidden_size\n", "holds a list"),
        ("model.hidden_size: {low: 9, high: 3}\n", "low = 9 above high = 3"),
        ("model.hidden_size: {low: 1, high: .inf}\n", "model.hidden_size.high = inf must be a finite number"),
        ("model.hidden_size: {low: 1}\n", "a range has low and high"),
        ("model.hidden_size: {low: 1, high: 4, lo: 2}\n", "not 'lo'"),
        ("model.optimizers.other.lr: {low: 0, high: 1, log: true}\n", "log scale from low = 0"),
        ("model.hidden_size: {low: 1, high: 8, step: -1}\n", "step = -1 must be a positive number"),
        ("model.hidden_size: []\n", "is an empty list"),
        ("model.family_args: [{rho: 4}]\n", "sweep its keys: model.family_args.<option>"),
        ("name: [a, b]\n", "'name' is not a setting a trial can vary (the sweep sets name, tags, db"),
        ("model.hidden_size: 8\n", "give a list of choices"),
    ],
)
def test_a_bad_space_is_one_line_naming_the_file_and_key(tmp_path, text, expected):
    from ortholab.cli.sweep_study import load_space
    from ortholab.models import ConfigError

    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_space(str(path))
    assert expected in str(refused.value) and str(path) in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "pwned").exists() and not __import__("pathlib").Path("pwned").exists()


@pytest.mark.parametrize(
    "space_text, extra, expected",
    [
        ("model.family_args.rhoo: [2, 4]\n", [], "model.family_args.rhoo is not an option of family 'scornn'"),
        (
            "model.hidden_size: [4, 6]\n",
            ["--model.hiden_size", "3"],
            "unknown config key model.hiden_size (on the command line)",
        ),
        ("trainer.max_stepz: [2]\n", [], "unknown config key trainer.max_stepz (in {space})"),  # not 'command line'
    ],
)
def test_a_typo_in_the_space_or_the_flags_is_refused_before_any_trial(
    tmp_path, capsys, monkeypatch, space_text, extra, expected
):
    """Before, a typo cost a failed trial that joined the study: the same command with the typo fixed then trained
    nothing and repeated the old error. Now it is one line before the study exists; fixed, the sweep trains."""
    from ortholab.cli.sweep_study import run_sweep
    from ortholab.models import ConfigError

    monkeypatch.chdir(tmp_path)  # the trials' run folders beside the store, not in the checkout
    space = tmp_path / "space.yaml"
    space.write_text(space_text)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.raises(ConfigError) as refused:
        run_sweep(DEMO, str(space), trials=1, db=db, name="typo", extra=[*TINY, *extra])
    expected = expected.format(space=space)
    assert expected in str(refused.value) and f"read with {space}'s first values" in str(refused.value)
    assert not (tmp_path / "runs.db").exists()  # refused before the store was made: no study, no run, no file
    if "hiden" not in space_text + " ".join(extra):
        return
    study = run_sweep(DEMO, str(space), trials=1, db=db, name="typo", extra=list(TINY))  # the typo fixed
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE]
    said = capsys.readouterr().out
    assert "continuing the study" not in said  # nothing of the refused attempt is left to join
    (run,) = Store(db, access="read").list_runs()  # each trial's end is said, with its run
    assert f"sweep typo: trial 0 is run {run.id}, best val/loss {run.best:.4g}" in said
    slow = [*TINY, "--trainer.val_check_interval", "100"]  # 6 steps, none validated: once known after a trial only
    with pytest.raises(ConfigError, match=r"max_steps = 6 ends before the first validation \(trainer.val_check_"):
        run_sweep(DEMO, str(space), trials=1, db=db, name="unvalidated", extra=slow)
    with pytest.raises(ConfigError, match=r"trainer.limit_val_batches = 0 turns validation off"):
        off = [*TINY, "--trainer.limit_val_batches", "0"]
        run_sweep(DEMO, str(space), trials=1, db=db, name="unvalidated", extra=off)
    assert len(Store(db, access="read").list_runs()) == 1  # neither trained a trial
    epochs = [*TINY, "--trainer.val_check_interval", "null", "--trainer.check_val_every_n_epoch", "2"]  # at step 8
    with pytest.raises(ConfigError, match=r"no validation ran in its 6 steps: a smaller --trainer.val_check_interval"):
        run_sweep(DEMO, str(space), trials=1, db=db, name="epochs", extra=epochs)  # the data's epoch: known after
    study = run_sweep(DEMO, str(space), trials=2, db=db, name="typo", extra=list(TINY))  # the same name: joined
    assert len(study.trials) == 2
    assert "sweep typo: continuing the study of that name in the store (1 trials done" in capsys.readouterr().out


def test_every_choice_and_both_ends_of_every_range_are_read_before_any_trial(tmp_path, monkeypatch):
    """Before, only the space's first values were read: a misspelt later choice failed the trials that drew it, one
    by one, each joining the study. Now each choice and each end of a range is read once, in as many points as the
    longest list, and a bad one is refused naming the point's values before the store exists."""
    from ortholab.cli.sweep_study import check_points, run_sweep
    from ortholab.models import ConfigError

    space = {
        "model.family": ["scornn", "lstm", "gru"],
        "model.hidden_size": [4, 6],
        "data.batch_size": {"low": 10, "high": 55, "step": 10},  # Optuna draws at most 50 from it
        "model.optimizers.other.lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True},
    }
    points = check_points(space)
    assert len(points) == 3 and points[0] == {k: v[0] if isinstance(v, list) else v["low"] for k, v in space.items()}
    for key, spec in space.items():
        held = [point[key] for point in points]
        if isinstance(spec, list):
            assert sorted(set(held), key=spec.index) == spec  # every choice, in the space's order
        else:
            assert min(held) == spec["low"] and max(held) == (50 if key == "data.batch_size" else spec["high"])
    assert check_points({"model.hidden_size": [4], "data.batch_size": {"low": 10, "high": 10}}) == [
        {"model.hidden_size": 4, "data.batch_size": 10}  # the same point twice is read once
    ]

    monkeypatch.chdir(tmp_path)
    space_file = tmp_path / "space.yaml"
    space_file.write_text("model.hidden_size: [4, 6, 8]\nmodel.family_args.rho: [2, 4]\ntrainer.precision: [32, 61]\n")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.raises(ConfigError) as refused:
        run_sweep(DEMO, str(space_file), trials=1, db=db, name="later", extra=list(TINY))
    said = str(refused.value)
    assert "61" in said and "trainer.precision" in said
    assert (
        f"read with {space_file}'s values model.hidden_size = 6, model.family_args.rho = 4, trainer.precision = 61"
        in said
    )
    assert not (tmp_path / "runs.db").exists()  # no study, no failed trial


def test_a_float_range_with_a_step_draws_on_its_grid():
    """The space's `step` of a float range was accepted and then ignored: trials drew any value between the ends."""
    from ortholab.cli.sweep_study import suggest

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    space = {"model.family_args.rho": {"low": 0.1, "high": 0.5, "step": 0.1}}
    drawn = {round(suggest(study.ask(), space)["model.family_args.rho"], 12) for _ in range(40)}
    assert drawn <= {0.1, 0.2, 0.3, 0.4, 0.5} and len(drawn) > 1


def test_an_int_range_on_a_log_scale_draws_ints_and_an_exponent_without_a_dot_is_a_number(tmp_path):
    """`model.hidden_size: {low: 32, high: 256, log: true}` drew floats (100.18), which every trial refused after the
    check had read its int ends; `{low: 1e-5, ...}` was refused as "'1e-5' must be a finite number" (YAML 1.1 reads
    an exponent without a dot as text), while a list's 1e-3 was taken as the number."""
    from ortholab.cli.sweep_study import check_points, load_space, suggest

    path = tmp_path / "space.yaml"
    path.write_text(
        "model.hidden_size: {low: 32, high: 256, log: true}\nmodel.optimizers.other.lr: {low: 1e-5, high: 1E-3}\n"
    )
    space = load_space(str(path))
    lr = space["model.optimizers.other.lr"]
    assert lr == {"low": float("1e-5"), "high": float("1E-3")}  # the numbers, as YAML 1.2 reads them
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = [suggest(study.ask(), space) for _ in range(20)]
    sizes = [d["model.hidden_size"] for d in drawn]
    assert all(isinstance(n, int) and 32 <= n <= 256 for n in sizes) and len(set(sizes)) > 1
    assert all(lr["low"] <= d["model.optimizers.other.lr"] <= lr["high"] for d in drawn)
    assert [p["model.hidden_size"] for p in check_points(space)] == [32, 256]  # the ends a trial can draw, read first


def test_a_worker_the_sweep_started_does_not_call_the_new_study_continued(tmp_path, capsys, monkeypatch):
    """`--workers 2` on a new --name printed 'continuing the study of that name in the store (0 trials done, ...)':
    the worker joined while the starter's first trial ran. The starter says it where a study is continued."""
    from ortholab.cli.sweep_study import WORKER_ENV, open_study, say_continued

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    Store(db)
    study = open_study("new", db, "tpe", {"model.hidden_size": [4, 6]}, seed=0)
    study.ask()  # the starter's first trial, running
    monkeypatch.setenv(WORKER_ENV, "1")
    say_continued(open_study("new", db, "tpe", {"model.hidden_size": [4, 6]}, seed=1), 2)
    assert capsys.readouterr().out == ""
    monkeypatch.delenv(WORKER_ENV)
    say_continued(study, 2)  # the same command again, as a user would run it: said
    assert "sweep new: continuing the study of that name in the store" in capsys.readouterr().out


def test_a_new_grid_study_is_not_called_continued_and_a_capped_count_and_a_new_store_are_said(tmp_path, capsys):
    """A new grid study holds its points as waiting trials: the sweep once called it 'continuing the study of that
    name (0 trials done)'; and `--trials 5` on a grid of 2 trained 2 in silence."""
    from ortholab.cli.sweep_study import open_study, run_sweep, say_continued
    from ortholab.models import ConfigError

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    Store(db)  # OrthoLab's tables first, as run_sweep makes them
    space = {"model.hidden_size": [4, 6]}
    study = open_study("grid", db, "grid", space, seed=0)
    say_continued(study, 2)
    assert capsys.readouterr().out == "" and len(study.trials) == 2  # the two points, waiting
    trial = study.ask()
    study.tell(trial, 0.5)
    say_continued(open_study("grid", db, "grid", space, seed=0), 2)
    said = capsys.readouterr().out
    assert "sweep grid: continuing the study of that name in the store (1 trials done" in said
    assert "warning" not in said  # the same space and flags
    open_study("grid", db, "grid", {"model.hidden_size": [4, 8]}, seed=0, flags=["--trainer.max_steps", "10"])
    assert capsys.readouterr().out.startswith(
        "warning: sweep grid: the study's earlier trials had another space and other flags than this command gives "
        "(their flags: none); "
    )
    typo = tmp_path / "space.yaml"
    typo.write_text("model.hiden_size: [4, 6]\n")  # refused before any trial, after the count is settled
    with pytest.raises(ConfigError):
        run_sweep(DEMO, str(typo), trials=5, db=db, name="capped", sampler="grid", extra=list(TINY), workers=9)
    said = capsys.readouterr().out
    assert "sweep capped: the grid has 2 points, so --trials 5 trains 2" in said and "New run store" not in said
    assert "sweep capped: --workers 9 for 2 trials starts 2" in said  # not 8 helpers with no trial to take
    elsewhere = tmp_path / "mistyped" / "runs.db"  # a refused sweep makes no store, at a mistyped --db either
    with pytest.raises(ConfigError):
        run_sweep(DEMO, str(typo), trials=1, db=str(elsewhere), name="new", extra=list(TINY))
    assert "New run store" not in capsys.readouterr().out and not elsewhere.parent.exists()


def test_a_trial_gets_the_store_through_its_environment_never_its_command_line(tmp_path, monkeypatch):
    """`ps` shows every local user a process's command line: the store's URL (with its password) goes to the trial's
    environment instead, and a failed trial's reason comes back masked."""
    from ortholab.cli import sweep_study as sweep

    url = "postgresql+psycopg://ortholab:s3cretpw@db.example:5432/runs"
    calls = []

    class FakeChild:  # the trial's process: it writes its one error line to the stderr file it was given
        def __init__(self, args, **kwargs):
            calls.append((args, kwargs.get("env") or {}))
            kwargs["stderr"].write(f"ortholab: error: Cannot use the run database {url}: down\n")

        def wait(self):
            return 2

    monkeypatch.setattr(sweep.subprocess, "Popen", FakeChild)
    monkeypatch.setattr(sweep, "Store", lambda db: type("NoRuns", (), {"list_runs": lambda self: []})())
    with pytest.raises(sweep.TrialFailed) as failed:
        sweep.fit_trial(DEMO, {"model.hidden_size": 6}, url, "t0", ["sweep:s"], ["--trainer.max_steps", "2"])
    ((args, env),) = calls
    assert not [a for a in args if "s3cretpw" in a] and "--db" not in args
    assert env["ORTHOLAB_DB"] == url
    assert env["ORTHOLAB_STOP_WITH_PARENT"] == str(os.getpid())  # the trial stops with its sweep, even after kill -9
    assert "s3cretpw" not in str(failed.value) and "ortholab:***@db.example" in str(failed.value)


def test_the_sweeps_own_flags_inside_a_mapping_hold_beside_the_trials_values(capsys):
    """`sweep --model.optimizers.other.lr 0.05 --model.family_args.init zeros` over a space of
    model.optimizers.recurrent.lr: each trial's config has all three, with the config's optimizer names and rho
    (once the trial's values came as whole mappings rebuilt from the config, which dropped the sweep's own flags)."""
    import yaml

    from ortholab.cli.main import main
    from ortholab.cli.sweep_study import trial_args

    extra = ["--model.optimizers.other.lr", "0.05", "--model.family_args.rho", "3"]
    values = {"model.optimizers.recurrent.lr": 0.002, "model.family_args.init": "zeros"}  # text: not '"zeros"'
    args = trial_args(DEMO, values, "t0", ["s"], extra)
    with pytest.raises(SystemExit) as printed:
        main([*args, "--print_config"])
    assert printed.value.code in (0, None)
    model = yaml.safe_load(capsys.readouterr().out)["model"]
    chosen = {group: (spec["name"], spec["lr"]) for group, spec in model["optimizers"].items()}  # printed whole
    assert chosen == {"recurrent": ("rmsprop_tf", 0.002), "other": ("rmsprop_tf", 0.05)}
    assert (model["family_args"]["rho"], model["family_args"]["init"]) == (3, "zeros")


@pytest.mark.parametrize("workers, threads", [(1, None), (2, "4")])
def test_each_worker_and_its_trials_get_their_share_of_the_cores(tmp_path, monkeypatch, workers, threads):
    """`sweep --workers 2` on 8 cores: the other worker and each trial are told to use 4 threads (OMP_NUM_THREADS).
    At a thread per core each, trainings spin against each other (docs/testing.md); one worker keeps torch's default,
    and a user's own OMP_NUM_THREADS stands."""
    from ortholab.cli import sweep_study as sweep
    from ortholab.models import ConfigError

    started = []

    class FakeChild:  # the other worker ends at once; the trial fails with one error line, so nothing trains here
        def __init__(self, args, **kwargs):
            self.command = args[3]
            started.append((self.command, kwargs["env"].get("OMP_NUM_THREADS")))
            if self.command == "fit":
                kwargs["stderr"].write("ortholab: error: not trained in this test\n")

        def poll(self):
            return self.wait()

        def wait(self):
            return 2 if self.command == "fit" else 0

    monkeypatch.setattr(sweep.subprocess, "Popen", FakeChild)
    monkeypatch.setattr(sweep.children, "read_fit_args", lambda argv, env=None: (None, None))  # flags: passed
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    space = tmp_path / "space.yaml"
    space.write_text("model.hidden_size: [4, 6]\n")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.raises(ConfigError, match=f"none of its {workers} trials completed"):  # a trial for each worker
        sweep.run_sweep(DEMO, str(space), trials=workers, db=db, workers=workers)
    assert sorted(started) == sorted([("fit", threads)] * workers + [("sweep", threads)] * (workers - 1))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    started.clear()
    with pytest.raises(ConfigError):
        sweep.run_sweep(DEMO, str(space), trials=workers, db=db, workers=workers, name="again")
    assert {threads for _, threads in started} == {"3"}  # inherited from this process, not set by the sweep


def test_a_study_without_a_completed_trial_is_refused_with_the_first_reason(tmp_path):
    from ortholab.cli.sweep_study import check_completed
    from ortholab.models import ConfigError

    study = optuna.create_study(study_name="doomed", storage=f"sqlite:///{tmp_path / 'o.db'}")
    for number in range(2):
        trial = study.ask()
        trial.set_user_attr("error", f"trial doomed-t{number} failed: model.hidden_size must be positive")
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    with pytest.raises(ConfigError, match="none of its 2 trials completed; the first failure: trial doomed-t0"):
        check_completed(study)
    trial = study.ask()
    study.tell(trial, 1.0)
    check_completed(study)  # one completed trial is a result


def test_the_flag_check_names_bad_family_options_and_leaves_shapes_it_does_not_know_to_the_run():
    """A printed config's family options and optimizers as a run checks them; an odd shape is no traceback here."""
    import yaml

    from ortholab.cli.children import _refused_model_options

    def refused(text: str) -> str | None:  # as read_fit_args gives it the printed config
        return _refused_model_options(yaml.safe_load(text))

    model = "model:\n  family: scornn\n  hidden_size: 8\n"
    assert "model.family_args.rhoo is not an option" in refused(model + "  family_args: {rhoo: 4}\n")
    assert "recurrent must be a mapping" in refused(model + "  optimizers: {recurrent: 5}\n")
    assert refused(model + "  family_args: [1, 2]\n") is None  # the run names it with its key
    assert refused("- a list\n") is None and refused("model: 3\n") is None
    # `--model.family lstm` on a scoRNN config: fit's own line with the flags that fix it (the sweep said only that
    # rho is no option of lstm's)
    scornn = model + "  family_args: {rho: 4}\n  optimizers: {recurrent: {lr: 0.001}}\n"
    lstm = scornn.replace("scornn", "lstm")
    said = _refused_model_options(yaml.safe_load(lstm), ["--config", "c.yaml", "--model.family", "lstm"])
    assert said.startswith("--model.family lstm: the config's model.family_args ['rho']"), said
    assert "--model.family_args '{}' --model.optimizers '{}'" in said
    given = ["--model.family=lstm", "--model.family_args", "{}", "--model.optimizers", "{}"]
    assert _refused_model_options(yaml.safe_load(lstm.split("  family_args")[0]), given) is None


@pytest.mark.parametrize("kind", ["tpe", "random"])
def test_a_command_joining_a_study_does_not_redraw_the_values_its_first_command_drew(tmp_path, kind):
    """Walk-through 7: the same `sweep` command again (same --seed 0) drew the first command's values anew, so two
    of four trials trained points already trained. Each command draws from its own stream; the first still follows
    --seed (the same study made again draws the same first values)."""
    from ortholab.cli.sweep_study import open_study

    space = {"model.optimizers.recurrent.lr": {"low": 1.0e-5, "high": 1.0e-3, "log": True}}

    def draw(study, count):
        values = []
        for _ in range(count):
            trial = study.ask()
            values.append(trial.suggest_float("lr", 1.0e-5, 1.0e-3, log=True))
            study.tell(trial, 0.5)
        return values

    first = draw(open_study("s", f"sqlite:///{tmp_path / 'a.db'}", kind, space, seed=0), 2)
    assert draw(open_study("s", f"sqlite:///{tmp_path / 'b.db'}", kind, space, seed=0), 2) == first
    again = draw(open_study("s", f"sqlite:///{tmp_path / 'a.db'}", kind, space, seed=0), 2)  # joined
    assert not set(again) & set(first)


POPPER = """
import sys, time, optuna
from ortholab.cli.sweep_study import study_storage
optuna.logging.set_verbosity(optuna.logging.ERROR)
study = optuna.load_study(study_name="race", storage=study_storage(sys.argv[1]))
while time.time() < float(sys.argv[2]):  # both start popping at the same moment
    time.sleep(0.001)
taken = []
while True:
    trial = study.ask()  # a waiting grid point while one is left
    study.tell(trial, 0.0)
    if trial.number >= int(sys.argv[3]):
        break
    taken.append(trial.number)
print(" ".join(map(str, taken)))
"""


def test_two_workers_never_take_the_same_waiting_grid_point(tmp_path):
    """On SQLite two workers could both read a waiting point, both set it running and both train it (the second
    then failed: "Cannot tell a COMPLETE trial", seen once in CI): study_storage makes the read and the write one."""
    import time

    from ortholab.cli.sweep_study import study_storage

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    Store(db)
    points = 60
    study = optuna.create_study(study_name="race", storage=study_storage(db))
    for k in range(points):
        study.enqueue_trial({"x": float(k)})
    start = str(time.time() + 3)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    workers = [
        subprocess.Popen([sys.executable, "-c", POPPER, db, start, str(points)], stdout=subprocess.PIPE, text=True,
                         env=env)
        for _ in range(2)
    ]  # fmt: skip
    taken = [[int(n) for n in worker.communicate(timeout=300)[0].split()] for worker in workers]
    assert all(worker.returncode == 0 for worker in workers)
    assert sorted(taken[0] + taken[1]) == list(range(points))  # each point once, none twice


def test_a_grid_sweep_walks_a_ranges_steps_as_written(tmp_path):
    """sweeps.md says `step` draws on a grid, and `--sampler grid` refused every range; now a range with a step (an
    int range without one: step 1) is its grid's values from low to high, in decimals as written."""
    from ortholab.cli.sweep_study import grid_points, open_study, suggest
    from ortholab.errors import ConfigError

    space = {
        "model.family_args.rho": {"low": 0.1, "high": 0.3, "step": 0.1},
        "data.batch_size": {"low": 10, "high": 25, "step": 10},
    }
    points = grid_points(space)
    assert points == [
        {"model.family_args.rho": rho, "data.batch_size": size} for rho in (0.1, 0.2, 0.3) for size in (10, 20)
    ]
    study = open_study("steps", f"sqlite:///{tmp_path / 'runs.db'}", "grid", space, seed=0)
    drawn = []
    for _ in points:
        trial = study.ask()
        drawn.append(suggest(trial, space))
        study.tell(trial, 0.0)

    def key(point):
        return tuple(point.values())

    assert sorted(drawn, key=key) == sorted(points, key=key)  # each point once, exactly as written
    assert all(isinstance(point["data.batch_size"], int) for point in drawn)
    for unstepped, said in (
        ({"low": 0.1, "high": 0.3}, "continuous"),
        ({"low": 1, "high": 8, "log": True}, "log-scale"),
    ):
        with pytest.raises(ConfigError, match=f"model.family_args.rho is a {said} range"):
            grid_points({"model.family_args.rho": unstepped})
    with pytest.raises(ConfigError, match=r"data.batch_size has 1000000000000 values from 1 to 1000000000000 by 1"):
        grid_points({"data.batch_size": {"low": 1, "high": 10**12}})  # refused before a value is made
    with pytest.raises(ConfigError, match=r"a grid of 40000 points \(a 200 x b 200\), more than 10000"):
        grid_points({"a": list(range(200)), "b": list(range(200))})
