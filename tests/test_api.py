"""Training from Python equals training from the command line."""

import yaml
from test_cli import DEMO, TINY, ortholab

from ortholab.db import Store
from ortholab.training.api import fit


def test_fit_from_python_records_the_same_run_as_the_cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'store.db'}"
    done = ortholab("fit", "--config", DEMO, *TINY, "--db", db, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    overrides = {
        "model.hidden_size": 8,
        "model.family_args": {"rho": 4},
        "data.seq_len": 5,
        "data.train_size": 40,
        "data.batch_size": 10,
        "data.val_size": 20,
        "data.eval_batch_size": 20,
        "trainer.max_steps": 6,
        "trainer.val_check_interval": 3,
        "trainer.log_every_n_steps": 1,
        "trainer.enable_progress_bar": False,
        "trainer.enable_model_summary": False,
    }
    from_python = fit(DEMO, overrides, db=db)
    from_dict = fit(yaml.safe_load(open(DEMO)), overrides, db=db)  # named after its task and family, as a CLI run
    store = Store(db)
    cli_run = min(run.id for run in store.list_runs())
    assert {from_python, from_dict} == {cli_run + 1, cli_run + 2}
    reference = [p.value for p in store.metric_series(cli_run, "train/loss")]
    for run_id in (from_python, from_dict):  # same seed, data and config: the same numbers
        assert [p.value for p in store.metric_series(run_id, "train/loss")] == reference
    assert store.get_run(from_dict).name == "copying_scornn"  # not "config", its scratch file's name


def test_fit_resolves_the_configs_short_class_paths_in_a_fresh_process(tmp_path):
    """A notebook's first call: nothing has installed the class-path aliases yet (the CLI's main() does it)."""
    import subprocess
    import sys

    code = (
        f"from ortholab.training.api import fit; print('RUN', fit({DEMO!r}, {TINY!r}, "
        f"db='sqlite:///{tmp_path / 'store.db'}', runs_dir={str(tmp_path / 'runs')!r}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "RUN 1" in done.stdout


def test_fit_raises_the_parsers_error_as_a_config_error(tmp_path):
    import pytest

    from ortholab.errors import ConfigError

    with pytest.raises(ConfigError, match="hidden_size"):
        fit(
            DEMO,
            {"model.hidden_size": "many"},
            db=f"sqlite:///{tmp_path / 'store.db'}",
            runs_dir=str(tmp_path / "runs"),
        )


def test_a_bad_key_or_value_is_named_where_the_function_was_given_it(tmp_path):
    """The parser's words for the command line ("on the command line", a scratch file's path for a dict) read as what
    fit() was given: its overrides, or the config dict."""
    from pathlib import Path

    import pytest

    from ortholab.errors import ConfigError

    places = {"db": f"sqlite:///{tmp_path / 'store.db'}", "runs_dir": str(tmp_path / "runs")}
    with pytest.raises(ConfigError) as typo:
        fit(DEMO, {"model.hiden_size": 3}, **places)
    assert str(typo.value).startswith("unknown config key model.hiden_size (in overrides); did you mean model.hidden")
    config = yaml.safe_load(Path(DEMO).read_text())
    config["data"]["init_args"]["seq_len"] = "1OO"
    with pytest.raises(ConfigError) as wrong:
        fit(config, **places)
    assert str(wrong.value).startswith("data.seq_len = '1OO' (in the config dict): expected int")


def test_fit_reads_its_flags_as_the_command_does_and_gives_the_subnormal_mode_back(tmp_path):
    """fit() passed its flags to Lightning's parser as they were: one option of an optimizer group replaced the
    whole group (`model.optimizers.recurrent.name = None is not a known optimizer`), and a task's listed name was
    no class path; `ortholab fit` rewrites both first. It trains with subnormals flushed, as the command does, and
    leaves the caller's mode as it was."""
    from ortholab.training.subnormals import subnormals_flushed

    places = {"db": f"sqlite:///{tmp_path / 'store.db'}", "runs_dir": str(tmp_path / "runs")}
    before = subnormals_flushed()
    one_option = fit(DEMO, [*TINY, "--model.optimizers.recurrent.lr", "0.003"], **places)
    as_dict = fit(DEMO, {"model.optimizers.recurrent.lr": 0.002, "model.hidden_size": 8, "data.seq_len": 5,
                         "model.family_args": {"rho": 4}, "trainer.max_steps": 2, "data.train_size": 40},
                  **places)  # fmt: skip
    by_name = fit(DEMO, [*TINY, "--data.class_path", "adding"], **places)
    store = Store(places["db"])
    recurrent = store.get_run(one_option).config["model"]["optimizers"]["recurrent"]
    assert recurrent == {"name": "rmsprop_tf", "lr": 0.003}  # the group's optimizer kept, its lr changed
    assert store.get_run(by_name).task == "adding"
    assert store.get_run(as_dict).config["model"]["optimizers"]["recurrent"] == {"name": "rmsprop_tf", "lr": 0.002}
    assert subnormals_flushed() == before


def test_after_fit_the_process_answers_signals_as_it_did_before(tmp_path):
    """GracefulInterrupt's teardown put back the handler it had found, Lightning's, after Lightning had restored the
    process's own: a notebook or script that called fit() then ignored SIGTERM ('Received SIGTERM', and on)."""
    import signal

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    fit(DEMO, TINY, db=f"sqlite:///{tmp_path / 'store.db'}", runs_dir=str(tmp_path / "runs"))
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_fit_takes_path_objects_and_names_an_argument_of_another_type(tmp_path):
    from pathlib import Path

    import pytest

    run = fit(Path(DEMO), TINY, db=tmp_path / "store.db", runs_dir=tmp_path / "runs")
    assert Store(f"sqlite:///{tmp_path / 'store.db'}").get_run(run).run_dir.startswith(str(tmp_path / "runs"))
    for bad, said in (
        ({"config": 123}, "config must be a YAML file's path or a dict, got 123"),
        ({"name": 7}, "name must be a str, got 7"),
        ({"db": 3.5}, "db must be a str or a path, got 3.5"),
    ):
        with pytest.raises(TypeError, match=said):
            fit(**{"config": DEMO, **bad})


def test_ctrl_c_in_fit_is_a_keyboard_interrupt_with_the_run_interrupted(tmp_path, monkeypatch):
    """It was `ConfigError: ortholab fit stopped with exit code 130`, a configuration error for a user's Ctrl-C."""
    import signal

    import pytest

    from ortholab.training.module import RecurrentModule

    real_step = RecurrentModule.training_step

    def pressed(self, *args, **kwargs):  # as Python raises it on SIGINT, at step 2
        if self.trainer.global_step >= 2:
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(RecurrentModule, "training_step", pressed)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # Lightning ignores SIGINT from then on: not here
    db = f"sqlite:///{tmp_path / 'store.db'}"
    with pytest.raises(KeyboardInterrupt):
        fit(DEMO, TINY, db=db, runs_dir=str(tmp_path / "runs"))
    (run,) = Store(db).list_runs()
    assert run.status == "interrupted"
