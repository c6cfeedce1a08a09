"""`ortholab predict`: a recorded run's checkpoint on a split in, a predictions file in the predict run's folder
out, recorded as a run of stage 'predict' linked to its source run."""

import sqlite3
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
import yaml
from standins import SHARED_DATA
from tolerances import roundoff

from ortholab.cli.main import main
from ortholab.db import Store

REPO = Path(__file__).resolve().parents[1]
DEMOS = REPO / "configs" / "demo"
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
DIGITS = [
    *QUIET,
    "--model.hidden_size",
    "16",
    "--model.family_args.rho",
    "2",
    "--trainer.max_steps",
    "4",
    "--trainer.max_epochs",
    "null",
    "--trainer.val_check_interval",
    "2",
    "--trainer.check_val_every_n_epoch",
    "null",
    "--data.eval_batch_size",
    "100",
]


def ortholab(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as done:
        code = done.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A short recorded fit of scoRNN on the 8x8 digits, shared by the tests: (store URL, its run)."""
    folder = tmp_path_factory.mktemp("trained")
    db = f"sqlite:///{folder / 'runs.db'}"
    main(
        [
            "fit",
            "--config",
            str(DEMOS / "mnist_digits_scornn.yaml"),
            *DIGITS,
            "--db",
            db,
            "--runs_dir",
            str(folder / "runs"),
        ]
    )
    (run,) = Store(db).list_runs()
    return db, Store(db).get_run(run.id)


@pytest.fixture
def fresh(trained, tmp_path):
    """The trained run in a store of this test's own (a copy), so each test sees only its own predict runs."""
    db, source = trained
    copy = tmp_path / "runs.db"
    with sqlite3.connect(db.removeprefix("sqlite:///")) as original, sqlite3.connect(copy) as duplicate:
        original.backup(duplicate)  # SQLite's online backup: whatever the journal mode
    return f"sqlite:///{copy}", source


def test_predictions_of_a_sweeps_trial_are_not_counted_as_one_of_its_trials(fresh, tmp_path, capsys, monkeypatch):
    """The trial's sweep:/trial: tags stay with the trial: `runs --tag sweep:NAME` and the dashboard's count of a
    sweep's trials read them; its other tags go on to the predict run, and a --tags given wins."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    stored = Path(source.run_dir) / "config.yaml"  # as a sweep's trial stores them: its config's tags
    original = stored.read_text()
    try:
        stored.write_text(yaml.safe_dump({**yaml.safe_load(original), "tags": ["sweep:s", "trial:0", "kept"]}))
        Store(db, access="write").set_tags(source.id, add=["later"])  # a label given after: the run's, not its config's
        code, _, err = ortholab(capsys, "predict", "--run", source.id, "--db", db)
        assert code == 0, err
        code, _, err = ortholab(capsys, "predict", "--run", source.id, "--db", db, "--tags", '["trial:0"]')
        assert code == 0, err
    finally:
        stored.write_text(original)
    plain, given = sorted((r for r in Store(db).list_runs() if r.stage == "predict"), key=lambda r: r.id)
    assert plain.tags == ("kept",) and given.tags == ("trial:0",)
    code, out, _ = ortholab(capsys, "runs", "show", plain.id, "--db", db)  # no "yet": a predict run validates never
    assert code == 0 and "no best value (a predict run)" in out and f"predictions of run {source.id}" in out
    npz = Store(db).get_run(plain.id).info["predict"]["predictions"]
    assert Path(npz).is_file() and f"predictions file: {npz} (" in out


def test_a_run_from_a_trials_config_yaml_is_no_trial_of_its_sweep(fresh, tmp_path, capsys, monkeypatch):
    """The best trial tested or trained anew from its run folder's config.yaml (`--config RUN_DIR/config.yaml`) got
    the trial's sweep:/trial: tags: `runs --tag sweep:NAME` listed it and the dashboard named it the sweep's best.
    They are left off with a note; --tags given on the command line (as the sweep gives its trials') holds."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    config = tmp_path / "config.yaml"  # as a sweep's trial stores it
    stored = yaml.safe_load((Path(source.run_dir) / "config.yaml").read_text())
    config.write_text(yaml.safe_dump({**stored, "tags": ["sweep:s", "trial:0", "kept"]}))
    best = sorted((Path(source.run_dir) / "checkpoints").glob("best-step*.ckpt"))[-1]
    code, _, err = ortholab(capsys, "test", "--config", config, "--db", db, "--ckpt_path", best, *QUIET)
    assert code == 0, err
    assert "note: the config's tags sweep:s, trial:0 are left off: this run is no trial of that sweep" in err
    code, _, err = ortholab(
        capsys, "test", "--config", config, "--db", db, "--ckpt_path", best, *QUIET, "--tags", '["sweep:s", "x"]'
    )
    assert code == 0, err
    plain, given = sorted((r for r in Store(db).list_runs() if r.stage == "test"), key=lambda r: r.id)
    assert plain.tags == ("kept",) and given.tags == ("sweep:s", "x")


def test_predict_on_a_recorded_run_writes_class_scores_and_records_the_link(
    fresh, tmp_path, capsys, monkeypatch, recwarn
):
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    code, out, err = ortholab(capsys, "predict", "--run", source.id, "--db", db)
    assert code == 0, err
    assert not [w for w in recwarn if "dirpath has changed" in str(w.message)]  # nothing for the user to act on
    store = Store(db)
    (run,) = [r for r in store.list_runs() if r.stage == "predict"]
    detail = store.get_run(run.id)
    link = detail.info["predict"]
    best = sorted((Path(source.run_dir) / "checkpoints").glob("best-step*.ckpt"))[-1]
    assert (run.status, run.name, link["source_run"], link["split"]) == ("finished", source.name, source.id, "test")
    assert link["checkpoint"] == str(best.resolve())
    path = Path(link["predictions"])
    assert path.parent == Path(detail.run_dir).resolve() and path.name == "predictions-test.npz"
    assert f"written to {Path(detail.run_dir) / path.name}" in out or str(path.name) in out
    saved = np.load(path)
    scores, labels = saved["predictions"], saved["targets"]
    assert str(saved["kind"]) == "class_scores" and scores.shape == (360, 10) and link["sequences"] == 360
    assert np.abs(scores.sum(axis=1) - 1).max() <= roundoff(torch.float32, n=10)  # a softmax over 10 classes
    assert np.array_equal(saved["predicted_class"], scores.argmax(axis=1))
    # the same checkpoint through `ortholab test`: its recorded accuracy is the predictions' accuracy
    code, _, err = ortholab(
        capsys, "test", "--config", Path(source.run_dir) / "config.yaml", "--db", db, "--ckpt_path", best, *QUIET
    )
    assert code == 0, err
    (tested,) = [r for r in store.list_runs() if r.stage == "test"]
    assert tested.name == source.name  # a run folder's config.yaml names the run after its run, not 'config'
    assert not [w for w in recwarn if "dirpath has changed" in str(w.message)]  # nor for `test`
    (accuracy,) = [p.value for p in store.metric_series(tested.id, "test/acc")]
    assert abs(accuracy - float(np.mean(saved["predicted_class"] == labels))) <= roundoff(torch.float32, n=360)


def test_the_lightning_form_with_another_split_is_linked_too(fresh, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    last = Path(source.run_dir) / "checkpoints" / "last.ckpt"
    code, _, err = ortholab(
        capsys,
        "predict",
        "--config",
        Path(source.run_dir) / "config.yaml",
        "--db",
        db,
        "--ckpt_path",
        last,
        "--predict_split",
        "val",
        "--name",
        "digits-val",
        *QUIET,
    )
    assert code == 0, err
    store = Store(db)
    (run,) = [r for r in store.list_runs() if r.stage == "predict"]
    link = store.get_run(run.id).info["predict"]
    assert (run.name, link["source_run"], link["split"], link["sequences"]) == ("digits-val", source.id, "val", 180)
    assert np.load(link["predictions"])["predictions"].shape == (180, 10)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--config", DEMOS / "mnist_digits_scornn.yaml"], "predict needs trained weights"),
        (["--config", DEMOS / "mnist_digits_scornn.yaml", "--checkpoint", "best"], "give --run ID as well"),
        (["--run", "99"], "No run with id 99"),
    ],
)
def test_predict_without_weights_is_one_line(args, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Store(f"sqlite:///{tmp_path / 'runs.db'}")  # an empty store: `predict --run` never creates one
    code, _, err = ortholab(capsys, "predict", *args, "--db", f"sqlite:///{tmp_path / 'runs.db'}", *QUIET)
    (line,) = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert code == 2 and "Traceback" not in err and words in line
    assert not [r for r in Store(f"sqlite:///{tmp_path / 'runs.db'}").list_runs() if r.stage == "predict"]


@pytest.mark.slow
@pytest.mark.skipif(
    not (SHARED_DATA / "fsdd").is_dir() or not (SHARED_DATA / "poly_music").is_dir(),
    reason="needs ../shared/data (FSDD and JSB Chorales) as the data root",
)
def test_music_gives_next_frames_and_speech_gives_reconstructed_audio(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the data root is ../shared/data (tests/conftest.py)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    short = [
        *QUIET,
        "--trainer.max_steps",
        "2",
        "--trainer.max_epochs",
        "null",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.val_check_interval",
        "2",
        "--trainer.check_val_every_n_epoch",
        "null",
        "--db",
        db,
    ]
    speech = [
        "--data.max_utterances",
        "3",
        "--data.recordings_per_utterance",
        "2",
        "--data.batch_size",
        "2",
        "--data.cache_dir",
        "null",
        "--trainer.callbacks",
        "[]",
    ]
    assert ortholab(capsys, "fit", "--config", DEMOS / "music_jsb_lstm.yaml", *short)[0] == 0
    assert ortholab(capsys, "fit", "--config", DEMOS / "speech_fsdd_scornn.yaml", *short, *speech)[0] == 0
    store = Store(db)
    music_run, speech_run = sorted(store.list_runs(), key=lambda r: r.id)
    for run in (music_run, speech_run):
        code, _, err = ortholab(capsys, "predict", "--run", run.id, "--db", db, "--checkpoint", "last")
        assert code == 0, err
    music_link, speech_link = (
        store.get_run(r.id).info["predict"]
        for r in sorted((r for r in store.list_runs() if r.stage == "predict"), key=lambda r: r.id)
    )
    music = np.load(music_link["predictions"])
    assert str(music["kind"]) == "key_probabilities" and music["predictions"].shape[0] == 77  # JSB's test pieces
    assert music["predictions"].shape[2] == 88 and music["mask"].shape == music["predictions"].shape[:2]
    assert 0 <= music["predictions"].min() and music["predictions"].max() <= 1
    assert music_link["source_run"] == music_run.id
    frames = np.load(speech_link["predictions"])
    assert str(frames["kind"]) == "values" and frames["predictions"].shape == (3, frames["mask"].shape[1], 129)
    wavs = sorted((Path(speech_link["predictions"]).parent / "audio").glob("*.wav"))
    assert len(wavs) == speech_link["audio_files"] == 3
    for wav, valid in zip(wavs, frames["mask"].sum(axis=1), strict=True):
        samples, rate = soundfile.read(wav)
        # the utterance's own length: 'wisdom' framing gives T = 3 + ceil(samples / 128) frames, T - 1 predicted
        assert rate == 8000 and (valid - 3) * 128 < len(samples) <= (valid - 2) * 128
        assert np.abs(samples).max() > 0  # a waveform, not silence
    speech_predict = max(r.id for r in store.list_runs() if r.stage == "predict")
    code, out, _ = ortholab(capsys, "runs", "show", speech_predict, "--db", db)  # where a reader finds both
    assert (
        code == 0
        and (
            f"predictions file: {speech_link['predictions']} (3 sequences of the test split; 3 wav files in "
            f"{Path(speech_link['predictions']).parent / 'audio'})"
        )
        in out
    )


@pytest.mark.parametrize("command, split", [("test", "test"), ("validate", "val")])
def test_test_and_validate_take_a_recorded_run_as_predict_does(fresh, tmp_path, capsys, monkeypatch, command, split):
    """`ortholab test --run ID` was 'unknown config key run' while `predict --run ID` worked (walk-through 8): both
    take the run's stored config, store and best checkpoint, and record a run of their stage."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    code, out, err = ortholab(capsys, command, "--run", source.id, "--db", db)
    assert code == 0, err
    assert f"\n{split}/" in f"\n{out}" and "Best " not in out  # one evaluation: its value, not a best of several
    (scored,) = [r for r in Store(db).list_runs() if r.stage == command]
    assert scored.name == source.name and f"{split}/loss" in Store(db).metric_keys(scored.id)
    code, out, _ = ortholab(capsys, command, "--help")
    assert code == 0 and f"ortholab {command} --run ID [--checkpoint best|last|PATH] [--db URL]" in out
    assert "predict" not in out.split("Or Lightning's form")[0]


def test_an_evaluation_runs_card_names_the_checkpoint_it_evaluated_not_steps(fresh, tmp_path, capsys, monkeypatch):
    """`runs show` of a test run said 'steps 0' and nothing of the run or checkpoint it measured."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    code, _, err = ortholab(capsys, "test", "--run", source.id, "--db", db)
    assert code == 0, err
    tested = max((r for r in Store(db).list_runs() if r.stage == "test"), key=lambda r: r.id)
    code, out, _ = ortholab(capsys, "runs", "show", tested.id, "--db", db)
    lines = out.splitlines()
    assert code == 0 and lines[1].startswith("test/") and "steps" not in lines[1]
    (said,) = [line for line in lines if line.startswith("evaluated checkpoint: ")]
    assert said.removeprefix("evaluated checkpoint: ").startswith(str(Path(source.run_dir) / "checkpoints"))


def test_a_file_name_of_the_runs_checkpoints_folder_is_its_checkpoint_for_every_command(
    fresh, tmp_path, capsys, monkeypatch
):
    """`--checkpoint best-step4.ckpt`, a name `load_run(checkpoint=)` takes from the run's checkpoints folder, was
    looked for in the current folder by `validate --run` and `evaluate-audio`: 'no checkpoint best-step4.ckpt; the run
    folder holds [...]'. One module chooses the file for all three (training/checkpoint_choice.py)."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    best = sorted((Path(source.run_dir) / "checkpoints").glob("best-step*.ckpt"))[-1]
    code, _, err = ortholab(capsys, "validate", "--run", source.id, "--db", db, "--checkpoint", best.name, *QUIET)
    assert code == 0, err
    (scored,) = [r for r in Store(db).list_runs() if r.stage == "validate"]
    code, out, _ = ortholab(capsys, "runs", "show", scored.id, "--db", db)
    assert f"evaluated checkpoint: {best}" in out, out
    # found and read: what stops it is that the run is no speech run
    code, _, err = ortholab(capsys, "evaluate-audio", source.id, "--db", db, "--checkpoint", best.name)
    assert code == 2 and "audio evaluation needs the speech task" in err, err
    for command in (["validate", "--run"], ["evaluate-audio"]):  # a name it does not hold: what it holds
        code, _, err = ortholab(capsys, *command, source.id, "--db", db, "--checkpoint", "lats")
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"--checkpoint lats: run {source.id} holds best-step" in err and best.name in err, err
        assert "last.ckpt; give --checkpoint last, best, one of these names or a path" in err, err


@pytest.mark.parametrize("command", ["test", "validate", "predict"])
def test_a_config_given_with_run_keeps_the_runs_checkpoint(fresh, tmp_path, capsys, monkeypatch, command):
    """`test --run ID --config FILE` with the run's own config.yaml evaluated the untrained model: the file's
    `ckpt_path: null` replaced the run's checkpoint, as a config file replaces the flags before it."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    stored = Path(source.run_dir) / "config.yaml"
    assert "ckpt_path: null" in stored.read_text()
    code, _, err = ortholab(capsys, command, "--run", source.id, "--config", stored, "--db", db, *QUIET)
    assert code == 0, err
    evaluated = max((r for r in Store(db).list_runs() if r.stage == command), key=lambda r: r.id)
    code, out, _ = ortholab(capsys, "runs", "show", evaluated.id, "--db", db)
    said = "predictions of run " if command == "predict" else "evaluated checkpoint: "
    (line,) = [line for line in out.splitlines() if line.startswith(said)]
    assert str(Path(source.run_dir) / "checkpoints") in line


@pytest.mark.parametrize("command", ["test", "predict", "validate"])
def test_a_run_whose_folder_is_on_another_machine_says_so(fresh, tmp_path, capsys, monkeypatch, command):
    """On a store shared by several machines (PostgreSQL), `test --run ID` of a run another machine trained said
    'has no stored config; pass --config FILE as well', and with --config, that its checkpoints were missing."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    elsewhere = tmp_path / "on-another-machine" / "runs" / "7"
    run = Store(db).create_run(name="theirs", run_dir=str(elsewhere), hostname="gpu-box-2")
    code, _, err = ortholab(capsys, command, "--run", run, "--db", db)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"run {run}'s folder {elsewhere} (recorded on gpu-box-2) is not on this machine" in err
    assert f"{command} it where that folder is" in err and "--config FILE --checkpoint PATH" in err
    stored = Path(source.run_dir)  # copies of its config and checkpoint are enough
    copies = ["--config", stored / "config.yaml", "--checkpoint", stored / "checkpoints" / "last.ckpt"]
    code, _, err = ortholab(capsys, command, "--run", run, "--db", db, *copies, *QUIET)
    assert code == 0, err


@pytest.mark.parametrize("command", ["predict", "test"])
def test_a_checkpoint_that_is_no_checkpoint_is_one_line_exit_2(fresh, tmp_path, capsys, monkeypatch, command):
    """`--checkpoint config.yaml` (or a text file, a tensor saved by hand) ended in Lightning's `IndexError: pop from
    empty list`, a KeyError traceback, or a line naming --ckpt_path and only the exception's class."""
    monkeypatch.chdir(tmp_path)
    db, source = fresh
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "weights.pt")
    cases = [
        ("--checkpoint", Path(source.run_dir) / "config.yaml", "not a file torch.save writes"),
        ("--checkpoint", tmp_path / "notes.txt", "not a file torch.save writes"),
        ("--checkpoint", tmp_path / "weights.pt", "a torch file without state_dict"),
        ("--ckpt_path", tmp_path / "weights.pt", "a torch file without state_dict"),
    ]
    for flag, path, why in cases:
        code, _, err = ortholab(capsys, command, "--run", source.id, "--db", db, flag, path, *QUIET)
        (line,) = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
        assert code == 2 and "Traceback" not in err, err
        assert line.startswith(f"ortholab: error: {flag} {path}: not a Lightning checkpoint ({why}"), line
    junk = Path(source.run_dir) / "checkpoints" / "junk.ckpt"  # a file of its folder, named as the user typed it
    try:
        junk.write_text("not a checkpoint\n")
        code, _, err = ortholab(capsys, command, "--run", source.id, "--db", db, "--checkpoint", "junk.ckpt", *QUIET)
    finally:
        junk.unlink()
    (line,) = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert line.startswith(f"ortholab: error: --checkpoint junk.ckpt ({junk}): not a Lightning checkpoint"), line
    assert [r.stage for r in Store(db).list_runs()] == ["fit"]  # nothing recorded


def test_a_command_of_a_run_notes_the_data_folder_it_was_trained_with_that_the_shell_lacks(
    tmp_path, monkeypatch, capsys
):
    """`predict --run 20` in a shell without the $ORTHOLAB_DATA it trained with went to fetch the data set into the
    default cache; the run records the variable, and its commands name it."""
    from test_cli import DEMO, TINY

    from ortholab.cli.main import main
    from ortholab.db import Store
    from ortholab.db.provenance import RUN_ENVIRONMENT

    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    monkeypatch.setenv("ORTHOLAB_DATA", str(tmp_path / "data"))
    main(["fit", "--config", DEMO, *TINY, "--db", db])
    (run,) = Store(db).list_runs()
    assert Store(db).get_run(run.id).info["environment"]["ORTHOLAB_DATA"] == str(tmp_path / "data")
    capsys.readouterr()
    main(["validate", "--run", str(run.id), "--db", db])
    assert "was trained with" not in capsys.readouterr().err  # the same shell: nothing to say
    monkeypatch.delenv("ORTHOLAB_DATA")
    main(["validate", "--run", str(run.id), "--db", db])
    said = f"note: run {run.id} was trained with ORTHOLAB_DATA={tmp_path / 'data'}, and this shell does not set it"
    assert said in capsys.readouterr().err
    main(["runs", "show", str(run.id), "--db", db])
    assert f"environment: ORTHOLAB_DATA={tmp_path / 'data'}" in capsys.readouterr().out
    from ortholab import aliases
    from ortholab.datamodules.catalog import DATA_ENV

    assert RUN_ENVIRONMENT == (DATA_ENV, aliases.EXTRA_MODULES_VAR)
