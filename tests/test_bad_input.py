"""Bad input through `ortholab`: one line naming the key, file or value and the fix, exit code 2, nothing recorded
lost. The docs' bad-input table (docs/troubleshooting.md) lists every case with the test that checks it (see the
last test here)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from test_cli import DEMO, TINY

from ortholab.cli.main import main
from ortholab.datamodules import CopyingTask
from ortholab.db import Store

TROUBLESHOOTING = Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md"
DEMO_NAME = "configs/demo/copying_scornn.yaml"  # as `ortholab list configs` names it


class NaNTask(CopyingTask):
    """A user's own task whose data source slipped a NaN into the inputs."""

    def make_split(self, split):
        inputs, targets = super().make_split(split)
        inputs = torch.nn.functional.one_hot(inputs, 10).float()
        inputs[3, 2, 0] = float("nan")
        return inputs, targets


def fails(tmp_path, monkeypatch, capsys, *args, db=None):
    """Run `ortholab fit` with the tiny demo and `args`; return the error line (asserting exit code 2, no traceback)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", DEMO, *TINY, "--db", db or f"sqlite:///{tmp_path / 'x.db'}", *args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    return line


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["--model.hiden_size", "5"],
            "unknown config key model.hiden_size (on the command line); did you mean model.hidden_size?",
        ),
        (["--trainer.max_stesp", "5"], "did you mean trainer.max_steps?"),
        (["--confg", "x.yaml"], "unknown config key confg (on the command line); did you mean --config?"),  # a flag
        # first-hour review: `--model.help` (as `--data.help copying`) got "did you mean model.task.help?"
        (["--model.help"], "--model.help: the model's options are the --model.* lines of `ortholab fit --help`"),
        (["--trainer.help"], "--trainer.help: the trainer's options (Lightning's Trainer) are the --trainer.* lines"),
        (["--trainer.max_step", "5"], "did you mean trainer.max_steps?"),  # a prefix is not taken as the key
        (
            ["--data", "datamodules.CopyTask"],
            "data.class_path = 'datamodules.CopyTask' is not a registered task; did you mean datamodules.CopyingTask?",
        ),
        (
            ["--data.init_args.seq_lenn", "5"],
            "unknown config key data.seq_lenn (on the command line): datamodules.CopyingTask has no option "
            "'seq_lenn'; did you mean data.seq_len?",
        ),
        # a synonym: speech's data set is data.corpus (data.dataset was answered with the spelling's data.target)
        (["--data", "speech", "--data.dataset", "timit"], "has no option 'dataset'; did you mean data.corpus?"),
        (["--data", "mnist", "--data.corpus", "mnist"], "has no option 'corpus'; did you mean data.dataset?"),
        # a value one option takes: 'timit' is a corpus, 'srnn' a choice of the adding task's markers
        (["--data", "speech", "--data.source", "timit"], "has no option 'source'; did you mean data.corpus?"),
        (["--data", "adding", "--data.style", "srnn"], "has no option 'style'; did you mean data.markers?"),
    ],
)
def test_an_unknown_key_suggests_the_nearest_valid_one(tmp_path, monkeypatch, capsys, args, expected):
    assert expected in fails(tmp_path, monkeypatch, capsys, *args)


def test_a_tasks_listed_name_is_its_class_on_the_command_line_and_one_line_in_a_file(tmp_path, monkeypatch, capsys):
    """Issue 49: `--data.class_path mnist` (the name `ortholab list tasks` prints) gave jsonargparse's raw Union
    message; on the command line it now names the task's class, in a config file it gets a did-you-mean."""
    for args in (["--data.class_path", "mnist"], ["--data.class_path=mnist"], ["--data", "mnist"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["fit", "--config", DEMO, *args, "--print_config"])
        assert exit_info.value.code == 0 and "class_path: datamodules.PixelMNIST" in capsys.readouterr().out
    (tmp_path / "short.yaml").write_text("data:\n  class_path: mnist\n")
    line = fails(tmp_path, monkeypatch, capsys, "--config", str(tmp_path / "short.yaml"))
    said = f"data.class_path = 'mnist' (in {tmp_path / 'short.yaml'}) is not a task's class path; did you mean"
    assert f"{said} datamodules.PixelMNIST?" in line
    line = fails(tmp_path, monkeypatch, capsys, "--data", "mnst")
    assert "data.class_path = 'mnst' (on the command line) is not a task's class path; did you mean" in line
    assert "did you mean mnist (datamodules.PixelMNIST)?" in line  # the short name the command line takes


def test_a_task_name_near_none_is_one_line_and_cites_a_config_module_python_cannot_import(
    tmp_path, monkeypatch, capsys
):
    """`--data sign_of_sum` (a task of one's own, its module not importable here) raised IndexError: no task name
    is near it; now the line says so and why the task may be missing, as a family's refusal does."""
    import os

    line = fails(tmp_path, monkeypatch, capsys, "--data", "zzzzqqq")
    assert "data.class_path = 'zzzzqqq' (on the command line) is not a task's class path; `ortholab list" in line
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", os.environ["ORTHOLAB_CONFIG_MODULES"] + ",mytasks_not_here")
    line = fails(tmp_path, monkeypatch, capsys, "--data", "sign_of_sum")
    assert "names 'mytasks_not_here', which Python cannot import here (No module named 'mytasks_not_here')" in line


def test_a_config_module_that_fails_as_it_runs_is_one_line_naming_its_file_and_line(tmp_path, monkeypatch, capsys):
    """A syntax error or an exception in the user's own module was a 25-line traceback and exit 1."""
    (tmp_path / "brokenlab").mkdir()
    (tmp_path / "brokenlab" / "__init__.py").write_text("")
    (tmp_path / "brokenlab" / "syntax.py").write_text("x = 1\ndef f(:\n    pass\n")
    (tmp_path / "brokenlab" / "raises.py").write_text("import math\nraise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for module, said in (
        ("brokenlab.syntax", f"failed at {tmp_path / 'brokenlab' / 'syntax.py'}, line 2: SyntaxError: invalid syntax"),
        ("brokenlab.raises", f"failed at {tmp_path / 'brokenlab' / 'raises.py'}, line 2: RuntimeError: no GPU here"),
    ):
        monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", module)
        for argv in (["list", "tasks"], ["fit", "--config", DEMO, *TINY]):
            with pytest.raises(SystemExit) as stop:
                main(argv)
            err = capsys.readouterr().err.strip().splitlines()
            assert stop.value.code == 2 and len(err) == 1, err
            assert f"$ORTHOLAB_CONFIG_MODULES names {module!r}, whose import {said}" in err[0], err[0]


def test_a_config_module_whose_own_import_fails_is_refused_at_its_own_line(tmp_path, monkeypatch, capsys):
    """A package the module imports that is missing was taken for the module itself missing (a warning, exit 0);
    an exception raised inside the standard library was placed at the library's line, not the user's; one raised
    without a message read 'ValueError: ; fix it'."""
    (tmp_path / "deplab").mkdir()
    (tmp_path / "deplab" / "__init__.py").write_text("")
    (tmp_path / "deplab" / "needs.py").write_text("import math\nimport nosuch_dependency_pkg.sub\n")
    (tmp_path / "deplab" / "decodes.py").write_text("import json\n\njson.loads('{')\n")
    (tmp_path / "deplab" / "bare.py").write_text("raise ValueError()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for module, file, said in (
        ("deplab.needs", "needs.py", "line 2: ModuleNotFoundError: No module named 'nosuch_dependency_pkg'"),
        ("deplab.decodes", "decodes.py", "line 3: JSONDecodeError: Expecting property name"),
        ("deplab.bare", "bare.py", "line 1: ValueError; fix it"),  # no message: the type's name, not 'ValueError: '
    ):
        monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", module)
        with pytest.raises(SystemExit) as stop:
            main(["list", "tasks"])
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and len(err) == 1, err
        assert f"names {module!r}, whose import failed at {tmp_path / 'deplab' / file}, {said}" in err[0], err[0]
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "deplab.nosuch")  # the module itself missing: still a warning
    main(["list", "tasks"])
    assert "names 'deplab.nosuch', which Python cannot import here" in capsys.readouterr().err


def test_list_warns_that_a_config_module_python_cannot_import_is_missing_from_its_lists(monkeypatch, capsys):
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "nosuchlab")
    main(["list", "tasks"])
    out, err = capsys.readouterr()
    assert "copying" in out
    assert err.startswith("ortholab: warning: $ORTHOLAB_CONFIG_MODULES names 'nosuchlab', which Python cannot")


def test_a_callback_option_with_no_callback_named_says_to_name_it_first(tmp_path, monkeypatch, capsys):
    """jsonargparse fell back to Lightning's Callback base class and the line blamed the allow-list."""
    line = fails(tmp_path, monkeypatch, capsys, "--trainer.callbacks.every_n_steps", "2")
    assert line.endswith(
        "--trainer.callbacks.every_n_steps sets an option of the callback named before it on the command line, and "
        "none was: name it first (--trainer.callbacks+=CLASS --trainer.callbacks.every_n_steps VALUE), "
        "docs/configs.md#a-callback-of-your-own"
    ), line


WHOLE = "expected a whole number, written without a point or an exponent: give"


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--trainer.max_steps", "1e3"],
            f"trainer.max_steps = '1e3' (on the command line): {WHOLE} --trainer.max_steps 1000 (`ortholab fit --help` "
            "describes trainer.max_steps)",
        ),
        (["--trainer.max_steps=1000.0"], f"trainer.max_steps = '1000.0' (on the command line): {WHOLE} --trainer.max_"),
        (["--data.seq_len", "1e2"], f"data.seq_len = '1e2' (on the command line): {WHOLE} --data.seq_len 100 ("),
        (["--trainer.max_steps", "2.5"], "trainer.max_steps = '2.5' (on the command line): expected int ("),  # no fix
    ],
)
def test_a_count_written_as_a_float_is_refused_with_the_whole_number_to_give(
    tmp_path, monkeypatch, capsys, args, expected
):
    """`--trainer.max_steps 1e3` read "'1000.0': expected int", naming neither what was typed nor what to type."""
    line = fails(tmp_path, monkeypatch, capsys, *args)
    assert expected in line, line


def test_a_models_own_refusal_of_a_flag_says_it_was_given_on_the_command_line(tmp_path, monkeypatch, capsys):
    line = fails(tmp_path, monkeypatch, capsys, "--model.optimizers.recurent.lr", "1e-3")  # a dotted group flag
    assert "model.optimizers.recurent (on the command line): family 'scornn' has no parameter group" in line


def test_an_unknown_top_level_key_is_answered_with_the_parsers_top_level_keys(tmp_path, monkeypatch, capsys):
    """`seed: 3` in a config named no key a config may hold at its top; they are the parser's, not a list kept here."""
    (tmp_path / "seed.yaml").write_text("seed: 3\n")
    line = fails(tmp_path, monkeypatch, capsys, "--config", str(tmp_path / "seed.yaml"))
    listed = line.split("top-level keys are ")[1].split(";")[0].split(", ")
    with pytest.raises(SystemExit):
        main(["fit", "--config", DEMO, "--print_config"])
    assert listed == list(yaml.safe_load(capsys.readouterr().out)) and "seed_everything" in listed, line


def test_a_misspelt_key_in_a_config_file_is_named_too(tmp_path, monkeypatch, capsys):
    (tmp_path / "typo.yaml").write_text("model:\n  famliy: lstm\n")
    line = fails(tmp_path, monkeypatch, capsys, "--config", str(tmp_path / "typo.yaml"))
    assert f"unknown config key model.famliy (in {tmp_path / 'typo.yaml'}); did you mean model.family?" in line


@pytest.mark.parametrize(
    "content,expected",
    [
        ("trainer:\n  max_stepz: 3\n", "unknown config key trainer.max_stepz (in {file}); did you mean"),
        ("data:\n  init_args:\n    seq_lenn: 3\n", "unknown config key data.seq_lenn (in {file}): "),
        ("trainer:\n  max_steps: abc\n", "trainer.max_steps = 'abc' (in {file}): expected int"),
        (  # a task's option: its own key and where, not jsonargparse's `data` union cut mid-word
            "data:\n  class_path: datamodules.CopyingTask\n  init_args:\n    batch_size: twenty\n",
            "data.batch_size = 'twenty' (in {file}): expected int (`ortholab fit --data.help CopyingTask` describes",
        ),
        (  # a task's own check, raised inside jsonargparse's union error
            "data:\n  class_path: datamodules.CopyingTask\n  init_args:\n    val_size: 0\n",
            "data.val_size (in {file}) must be a positive integer, got 0",
        ),
        # the model's own checks (walk-through 7: they named no file, troubleshooting.md promised one)
        ("model:\n  family: scorn\n", "model.family = 'scorn' (in {file}) is not a registered family; did you mean"),
        (
            "model:\n  optimizers:\n    recurent: {name: adam, lr: 1.0e-3}\n",
            "model.optimizers.recurent (in {file}): family 'scornn' has no parameter group 'recurent'; did you mean "
            "'recurrent'? its groups",
        ),
        (
            "model:\n  optimizers:\n    default: {name: adam, lr: -1.0}\n",
            "model.optimizers.default.lr = -1.0 (in {file}) must be a positive finite number",
        ),
    ],
)
def test_a_bad_key_or_value_names_the_config_file_that_holds_it(tmp_path, monkeypatch, capsys, content, expected):
    """Of two config files, the error names the one whose key is wrong, not the first or the paper's config."""
    (tmp_path / "fine.yaml").write_text("trainer:\n  max_steps: 4\n")
    (tmp_path / "mine.yaml").write_text(content)
    args = ["--config", str(tmp_path / "fine.yaml"), "--config", str(tmp_path / "mine.yaml")]
    assert expected.format(file=tmp_path / "mine.yaml") in fails(tmp_path, monkeypatch, capsys, *args)


@pytest.mark.parametrize(
    "config",
    [
        "data:\n  class_path: subprocess.Popen\n  init_args: {args: [touch, pwned]}\n",
        "data:\n  class_path: os.system\n  init_args: {command: touch pwned}\n",
        "model:\n  class_path: os.system\n  init_args: {command: touch pwned}\n",
    ],
)
def test_a_config_naming_an_arbitrary_callable_is_refused(tmp_path, monkeypatch, capsys, config):
    (tmp_path / "evil.yaml").write_text(config)
    line = fails(tmp_path, monkeypatch, capsys, "--config", str(tmp_path / "evil.yaml"))
    assert not (tmp_path / "pwned").exists()
    assert "which a config may not import" in line or "unknown config key model" in line


def test_more_devices_than_the_machine_has(tmp_path, monkeypatch, capsys):
    wanted = str(torch.cuda.device_count() + 1)
    line = fails(tmp_path, monkeypatch, capsys, "--trainer.accelerator", "gpu", "--trainer.devices", wanted)
    assert "check --trainer.accelerator and --trainer.devices" in line and "CUDA device(s)" in line


def test_an_unwritable_run_folder_is_named(tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("")
    line = fails(tmp_path, monkeypatch, capsys, "--runs_dir", str(tmp_path / "afile" / "runs"))
    assert f"--runs_dir {tmp_path / 'afile' / 'runs'}: cannot write run folders there" in line
    assert Store(f"sqlite:///{tmp_path / 'x.db'}").list_runs() == []  # checked before a run is recorded


def test_a_checkpoint_of_another_family_is_refused_before_loading(tmp_path, monkeypatch, capsys):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", DEMO, *TINY, "--db", db])
    (earlier,) = Store(db).list_runs()
    checkpoint = Path(Store(db).get_run(earlier.id).run_dir) / "checkpoints" / "last.ckpt"
    line = fails(
        tmp_path,
        monkeypatch,
        capsys,
        "--model.family",
        "lstm",
        "--model.family_args",
        "{}",
        "--ckpt_path",
        str(checkpoint),
        db=db,
    )
    assert "the checkpoint holds a model with model.family = 'scornn', the config builds model.family = 'lstm'" in line
    assert "(`ortholab fit --resume RUN_ID` reuses a run's own config)" in line
    runs = {r.id: r for r in Store(db).list_runs()}
    assert runs[earlier.id].status == "finished" and runs[earlier.id].steps == earlier.steps  # nothing lost
    for command in ("validate", "test"):  # their own --run reads a run's config and checkpoint together
        with pytest.raises(SystemExit) as refused:
            main([command, "--config", DEMO, *TINY, "--model.hidden_size", "9", "--ckpt_path", str(checkpoint)])
        (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("ortholab: error:")]
        assert refused.value.code == 2 and "model.hidden_size = 8, the config builds model.hidden_size = 9" in line
        assert f"(`ortholab {command} --run RUN_ID` reads a run's own config and checkpoint)" in line


def test_a_ckpt_path_in_a_config_file_names_the_file_and_key(tmp_path, monkeypatch, capsys):
    """`ckpt_path: missing.ckpt` in a --config file was refused as `--ckpt_path missing.ckpt: ...`, a flag nobody
    typed: the line names the file and its key, as a model key's refusal does."""
    cases = [
        ("missing.ckpt", "ckpt_path = missing.ckpt (in {config}): no such file (looked for relative to the"),
        (str(tmp_path), f"ckpt_path = {tmp_path} (in {{config}}) is a folder"),
        ("best", "ckpt_path = best (in {config}) names no file"),
    ]
    for value, expected in cases:
        config = tmp_path / "resume_from.yaml"
        config.write_text(yaml.safe_dump({"ckpt_path": value}))
        line = fails(tmp_path, monkeypatch, capsys, "--config", str(config))
        assert expected.format(config=config) in line and "--ckpt_path" not in line, line
    line = fails(tmp_path, monkeypatch, capsys, "--config", str(config), "--ckpt_path", "typed.ckpt")
    assert "--ckpt_path typed.ckpt: no such file" in line, line  # the command line's, given after the file, stands
    assert Store(f"sqlite:///{tmp_path / 'x.db'}").list_runs() == []  # refused before a run is recorded


def test_a_relative_ckpt_path_in_a_config_file_missing_names_the_current_folder(tmp_path, monkeypatch, capsys):
    """A relative `ckpt_path:` in a --config file is read from the current folder (Lightning's way), not from the
    file's: where it is missing there, even beside the file, the line says where it was looked for."""
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "start.ckpt").write_bytes(b"")  # beside the config file, not in the current folder
    config = folder / "resume_from.yaml"
    config.write_text(yaml.safe_dump({"ckpt_path": "start.ckpt"}))
    line = fails(tmp_path, monkeypatch, capsys, "--config", str(config))
    assert (
        f"ckpt_path = start.ckpt (in {config}): no such file (looked for relative to the current folder, {tmp_path}, "
        f"not the config file's); give a .ckpt file" in line
    ), line
    config.write_text(yaml.safe_dump({"ckpt_path": str(tmp_path / "gone.ckpt")}))  # a full path: no folder to name
    line = fails(tmp_path, monkeypatch, capsys, "--config", str(config))
    assert f"(in {config}): no such file; give a .ckpt file" in line and "current folder" not in line, line
    assert Store(f"sqlite:///{tmp_path / 'x.db'}").list_runs() == []  # refused before a run is recorded


def test_nan_inputs_in_a_custom_dataset_name_the_split_and_sample(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "test_bad_input")  # the user's own task module, opted in
    line = fails(
        tmp_path,
        monkeypatch,
        capsys,
        "--data",
        "test_bad_input.NaNTask",
        "--data.seq_len",
        "5",
        "--data.train_size",
        "40",
        "--data.batch_size",
        "10",
        "--data.val_size",
        "20",
    )
    assert "NaNTask (val split): the inputs hold 1 NaN/infinite values (first in sample 3)" in line


def test_every_row_of_the_docs_bad_input_table_names_an_existing_test():
    section = TROUBLESHOOTING.read_text().split("## Bad input", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| input")]
    assert len(rows) >= 20
    for row in rows:
        tests = re.findall(r"`(tests/test_\w+\.py)::(\w+)`", row)
        assert tests, f"docs/troubleshooting.md row names no test: {row}"
        for path, name in tests:
            source = (TROUBLESHOOTING.parents[1] / path).read_text()
            assert f"def {name}(" in source, f"{path}::{name} (docs/troubleshooting.md) does not exist"


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--trainer.accelerator", "gpuu"], "trainer.accelerator = 'gpuu' (on the command line): You selected an"),
        (["--trainer.strategy", "foo"], "trainer.strategy = 'foo' (on the command line): You selected an invalid"),
        (["--trainer.precision", "15"], "trainer.precision = '15' (on the command line): expected one of 64, 32, 16"),
    ],
)
def test_a_trainer_value_lightning_refuses_is_one_line_and_records_no_run(
    tmp_path, monkeypatch, capsys, args, expected
):
    """Lightning's own refusals (raised while it builds the Trainer) were a traceback with exit code 1."""
    line = fails(tmp_path, monkeypatch, capsys, *args)
    assert expected in line and "Union subtypes" not in line, line
    db = tmp_path / "x.db"  # refused at parsing: no store made; by Lightning: a store without a run
    assert not db.exists() or Store(f"sqlite:///{db}", access="read").list_runs() == []


@pytest.mark.parametrize(
    "value, expected",
    [
        ("5 minutes", "trainer.max_time = '5 minutes' (on the command line) is not a duration: give DD:HH:MM:SS"),
        ("{hourz: 1}", "trainer.max_time = {'hourz': 1} (on the command line) is not a duration"),
        ("{hours: -1}", "trainer.max_time = {'hours': -1} (on the command line) is no time to train"),
        ("00:00:00:00", "trainer.max_time = '00:00:00:00' (on the command line) is no time to train"),
    ],
)
def test_a_max_time_lightning_cannot_read_or_of_no_time_is_one_line_and_records_no_run(
    tmp_path, monkeypatch, capsys, value, expected
):
    """Lightning's Timer refused a duration in words naming no key (`Timer(duration='5 minutes')`, or "'hourz' is an
    invalid keyword argument for __new__()"), and took a duration of 0 or less, recording a run finished at step 0."""
    line = fails(tmp_path, monkeypatch, capsys, "--trainer.max_time", value)
    assert expected in line and "{hours: 1, minutes: 30}" in line, line
    db = tmp_path / "x.db"
    assert not db.exists() or Store(f"sqlite:///{db}", access="read").list_runs() == []


def test_a_validation_interval_past_an_epoch_is_one_line_and_records_no_run(tmp_path, monkeypatch, capsys):
    """An int interval above an epoch's training batches was Lightning's ValueError once training began: a traceback,
    exit code 1 and a failed run (walk-through of docs/tasks.md: the generation demo has one batch an epoch)."""
    every_epoch = ["--trainer.check_val_every_n_epoch", "1"]  # the demo counts steps across epochs (null)
    line = fails(tmp_path, monkeypatch, capsys, *every_epoch, "--trainer.val_check_interval", "5")  # 4 batches an epoch
    assert "trainer.val_check_interval = 5 (on the command line) is more than the 4 training batch" in line, line
    assert "--trainer.val_check_interval 4 or less" in line and "check_val_every_n_epoch null" in line, line
    db = tmp_path / "x.db"
    assert not db.exists() or Store(f"sqlite:///{db}", access="read").list_runs() == []


def test_no_training_batch_at_all_is_left_to_lightning_not_refused(tmp_path, monkeypatch, capsys):
    """limit_train_batches 0 trains nothing (Lightning skips its interval check); the check refused it, advising an
    interval of 0 or less, which it refused too."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'x.db'}"
    every_epoch = ["--trainer.check_val_every_n_epoch", "1", "--trainer.val_check_interval", "5"]
    main(["fit", "--config", DEMO, *TINY, *every_epoch, "--trainer.limit_train_batches", "0", "--db", db])
    assert "val_check_interval" not in capsys.readouterr().err
    (run,) = Store(db, access="read").list_runs()
    assert run.status == "finished" and run.steps == 0, run


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--data.download", "false"], "fsdd is not in the data root"),
        (["--data.corpus", "timit"], "data.path is not set: give TIMIT's folder"),
    ],
)
def test_a_speech_corpus_not_there_records_no_run(tmp_path, monkeypatch, capsys, args, expected):
    """The speech task listed its corpus in setup, after the run was recorded: each such mistake left a failed run
    (walk-through 3); the other tasks' data errors never did."""
    monkeypatch.setenv("ORTHOLAB_DATA", str(tmp_path / "empty-data-root"))
    speech = str(Path(DEMO).parent / "speech_fsdd_scornn.yaml")
    line = fails(tmp_path, monkeypatch, capsys, "--config", speech, *args)
    assert expected in line, line
    db = tmp_path / "x.db"
    assert not db.exists() or Store(f"sqlite:///{db}", access="read").list_runs() == []


def test_an_allowed_module_python_cannot_import_is_one_line_saying_how_to_install_it(tmp_path, monkeypatch, capsys):
    """configs.md's own-classes example run from the package's parent folder: the console script does not put the
    current folder on sys.path, and jsonargparse's Union dump hid why (walk-through 3)."""
    import os

    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", os.environ["ORTHOLAB_CONFIG_MODULES"] + ",nosuchlab.callbacks")
    (tmp_path / "my.yaml").write_text("trainer:\n  callbacks:\n    - class_path: nosuchlab.callbacks.Hello\n")
    line = fails(tmp_path, monkeypatch, capsys, "--config", str(tmp_path / "my.yaml"))
    assert "names a class of 'nosuchlab.callbacks' (allowed by $ORTHOLAB_CONFIG_MODULES)" in line, line
    assert "No module named 'nosuchlab'" in line and "PYTHONPATH" in line and "Union" not in line


def test_a_mistyped_config_name_is_answered_with_the_installed_config_it_resembles(tmp_path, monkeypatch, capsys):
    """`--config configs/demo/copying_scornm.yaml` (a newcomer's typo): the installed config of the nearest name."""
    line = fails(tmp_path, monkeypatch, capsys, "--config", "configs/demo/copying_scornm.yaml")
    assert "copying_scornm.yaml: no such file; did you mean configs/demo/copying_scornn.yaml?" in line
    line = fails(tmp_path, monkeypatch, capsys, "--config", str(tmp_path / "zzz.yaml"))  # nothing near it
    assert "zzz.yaml: no such file; give a YAML config" in line
    line = fails(tmp_path, monkeypatch, capsys, "--config", str(tmp_path))
    assert f"--config {tmp_path}: not a file; give a YAML config" in line
    line = fails(tmp_path, monkeypatch, capsys, "--config", "")  # not the current folder
    assert "--config '': no such file; give a YAML config" in line, line


def test_a_missing_config_is_told_before_torch_and_lightning_load_and_inline_yaml_still_reads(tmp_path):
    """`fit --config nosuch.yaml` waited for Lightning's import (5 s here) to be told the file is not there; an
    inline mapping (`--config '{trainer: ...}'`, which jsonargparse reads as YAML) is no file and still trains."""
    told = subprocess.run(
        [sys.executable, "-c", EARLY, "fit", "--config", "nosuch.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert told.stderr.splitlines()[-1].startswith(f"ortholab: error: --config {tmp_path / 'nosuch.yaml'}: no such")
    assert told.stdout.split() == ["2", "False", "False"], (told.stdout, told.stderr)  # exit 2, neither imported
    db = f"sqlite:///{tmp_path / 'x.db'}"
    inline = ["--config", "{trainer: {max_steps: 2}}", "--runs_dir", str(tmp_path / "runs"), "--db", db]
    main(["fit", "--config", DEMO, *TINY, *inline])
    assert [r.steps for r in Store(db, access="read").list_runs()] == [2]


EARLY = """import sys
from ortholab.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as stop:
    print(stop.code, "torch" in sys.modules, "lightning" in sys.modules)
"""


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["predict", "--ru", "3"],
            "unknown config key ru (on the command line); did you mean --run? `ortholab predict",
        ),
        (
            ["fit", "--config", DEMO, "--zzz", "3"],
            "unknown config key zzz (on the command line); a config's top-level keys are seed_everything, trainer, "
            "model, data, db, name, tags, runs_dir, resume, analysis, test_every_validation, select_on, predict_split, "
            "ckpt_path, weights_only; `ortholab fit --help`",
        ),
        (["predict"], "no task given: give a recorded run with --run ID, or name a config with --config FILE"),
        (["evaluate-audio"], "evaluate-audio: give one run id, e.g. `ortholab evaluate-audio 6` (or --run 6;"),
        (["evaluate-audio", "--run", "999", "--db", "{db}"], "No run with id 999"),  # --run as predict takes it
        (["sweep", "--config", DEMO, "--space", "s.yaml", "--trials", "1", "--workrs", "2"], "did you mean --workers?"),
        (["reproduce", "scornn_table1", "--seds", "3", "--estimate"], "unknown flag --seds; did you mean --seeds?"),
        (["db", "versoin"], "'versoin' is not one of upgrade, version; did you mean version?"),  # not "argument action"
        (["sweep", "--config", DEMO, "--space", "s", "--trials", "1", "--sampler", "gird"], "--sampler 'gird' is not"),
        (["list", "tasks", "mnist"], "a task's options are described by `ortholab fit --data.help mnist`"),
    ],
)
def test_a_commands_own_flag_mistyped_or_missing_is_named_with_that_commands_help(tmp_path, capsys, argv, expected):
    """`predict --ru 3` was fit's unknown key with fit's help and no `; `; `sweep --workrs 2` went on to every trial
    as a config key; `predict` alone never named --run; `evaluate-audio --run 6` was an unknown flag."""
    db = str(tmp_path / "runs.db")
    Store(db).close()
    with pytest.raises(SystemExit) as exit_info:
        main([a.replace("{db}", db) for a in argv])
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert exit_info.value.code == 2 and "Traceback" not in err and expected in line, line


def test_an_invalid_choice_is_read_whether_python_quotes_the_choices_or_not():
    """argparse quotes the choices up to Python 3.12.x and not after: both read as the same line."""
    from ortholab.cli.common import _not_a_choice

    for listed in ("'upgrade', 'version'", "upgrade, version"):
        assert (
            _not_a_choice("action", "versoin", listed)
            == "'versoin' is not one of upgrade, version; did you mean version?"
        )


def test_where_a_refused_key_was_given_is_named_only_when_one_place_holds_it(tmp_path):
    """Review: a value ending in ';' or ':' got no place, 1e-3 did not match the 0.001 the code printed, and a
    callback added with `--trainer.callbacks+` was blamed on a config file whose list held another."""
    from ortholab.training.parse_errors import with_place

    (tmp_path / "cb.yaml").write_text("trainer:\n  callbacks: [HiddenTrajectory]\n")
    argv = ["fit", "--config", DEMO, "-c", str(tmp_path / "cb.yaml"), "--data.num_symbols", "9"]
    argv += ["--model.optimizers.default.lr", "1e-3", "--trainer.callbacks+", "AudioEvaluation"]
    assert (
        with_place("data.num_symbols = 9; at most 8", argv) == "data.num_symbols = 9 (on the command line); at most 8"
    )
    assert with_place("model.optimizers.default.lr = 0.001 must", argv).endswith("0.001 (on the command line) must")
    assert with_place("data.seq_len = 100, kept", argv) == f"data.seq_len = 100 (in {DEMO}), kept"
    for unplaced in ("trainer.callbacks: AudioEvaluation scores", "data.seq_len = 7; derived by the code"):
        assert with_place(unplaced, argv) == unplaced


def test_a_shipped_config_named_from_another_folder_is_placed_as_named(tmp_path, monkeypatch):
    """From the wheel (or any folder without configs/), `--config configs/demo/...` reads the installed copy; a
    refused value held there was placed nowhere (its file was looked for in the folder run from)."""
    from ortholab.training.parse_errors import _listed_classes, with_place

    monkeypatch.chdir(tmp_path)
    named = "configs/demo/text_tiny_lstm.yaml"
    argv = ["fit", "--config", named, "--trainer.max_steps", "3"]
    assert with_place("data.path is not set: give", argv) == f"data.path (in {named}) is not set: give"
    assert with_place("data.seq_len = 100, kept", [f"--config={DEMO_NAME}"]) == (
        f"data.seq_len = 100 (in {DEMO_NAME}), kept"
    )
    assert with_place("data.seq_len = 100, kept", ["fit", "--config", "configs/demo/nonesuch.yaml"]) == (
        "data.seq_len = 100, kept"
    )
    (tmp_path / "configs" / "demo").mkdir(parents=True)  # a folder's own configs/demo/... is the file read
    (tmp_path / DEMO_NAME).write_text("trainer:\n  max_steps: 3\n")
    assert with_place("data.seq_len = 100, kept", ["--config", DEMO_NAME]) == "data.seq_len = 100, kept"
    speech = "configs/demo/speech_fsdd_scornn.yaml"  # a callback's option given in a shipped config, placed there
    ((where, class_path, options),) = _listed_classes("trainer.callbacks", ["--config", speech])
    assert (where, class_path, options["utterances"]) == (
        f"in {speech}",
        "training.callbacks.audio.AudioEvaluation",
        12,
    )


def test_optimizers_given_as_a_name_is_shown_an_optimizers_mapping(tmp_path, monkeypatch, capsys):
    line = fails(tmp_path, monkeypatch, capsys, "--model.optimizers", "adam")
    assert "model.optimizers = 'adam' (on the command line): expected a mapping such as '{default: {name: adam" in line
    # a review's audit: a group given as a name quoted jsonargparse's next subtype error as the value
    line = fails(tmp_path, monkeypatch, capsys, "--model.optimizers", "{recurrent: adam}")
    assert "model.optimizers = \"{'recurrent': 'adam'}\" (on the command line): expected a mapping such as" in line


def test_a_library_user_loading_another_models_checkpoint_is_refused_before_any_weight():
    # Trainer.fit(module, ckpt_path=...) without the command line: the module's own check, the command line's rule
    from ortholab.errors import ConfigError
    from ortholab.training.module import RecurrentModule

    spec = CopyingTask(seq_len=10).spec
    saved = RecurrentModule(spec, family="scornn", hidden_size=8, family_args={"rho": 4})
    other = RecurrentModule(spec, family="scornn", hidden_size=6, family_args={"rho": 3})
    checkpoint = {"hyper_parameters": dict(saved.hparams), "state_dict": saved.state_dict()}
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(ConfigError, match=r"model.hidden_size = 8, this config builds model.hidden_size = 6"):
        other.on_load_checkpoint(checkpoint)
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())
    saved.on_load_checkpoint(checkpoint)  # its own: accepted


def test_a_default_optimizer_flag_that_no_group_takes_is_one_line(tmp_path, monkeypatch, capsys):
    line = fails(tmp_path, monkeypatch, capsys, "--model.optimizers.default.lr", "0.5")
    assert "model.optimizers.default (on the command line): no parameter group of family 'scornn' takes it" in line
    assert "model.optimizers.recurrent, model.optimizers.other each name their own optimizer" in line
    assert not (tmp_path / "x.db").exists()  # refused before the store was made


def test_a_flag_that_ends_a_known_key_is_suggested(tmp_path, monkeypatch, capsys):
    """`predict --split test` named every top-level key but not predict_split, too far for difflib's 0.6."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["predict", "--config", DEMO, *TINY, "--db", f"sqlite:///{tmp_path / 'x.db'}", "--split", "test"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "unknown config key split (on the command line); did you mean predict_split?" in err
