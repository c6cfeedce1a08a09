"""Issue 23's metric labels: each split against its own baseline, a frame-weighted evaluation loss, the music data
set told by its file, and one step for a metric point, an analysis and a checkpoint of the same moment."""

from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from standins import piano_pieces, roll, write_music_mat, write_text_set
from test_cli import DEMO, TINY
from tolerances import close, roundoff

from ortholab.cli.main import main
from ortholab.datamodules import CopyingTask
from ortholab.datamodules.music import PolyphonicMusic
from ortholab.datamodules.text import CharText
from ortholab.db import SQLLogger, Store
from ortholab.db.artifacts import EIGENVALUES, array_from_bytes
from ortholab.errors import ConfigError
from ortholab.training.callbacks.lifecycle import ContinueRun
from ortholab.training.module import RecurrentModule

REPO = Path(__file__).resolve().parents[1]
MUSIC_DEMO = str(REPO / "configs" / "demo" / "music_jsb_lstm.yaml")
ALL_KEYS = list(range(21, 109))


def frequency_nll(train_pieces, pieces) -> float:
    """NLL per predicted step of every key at its training frequency (the music baseline, computed here anew)."""
    p = np.clip(np.concatenate([roll(q) for q in train_pieces]).astype(float).mean(0), 1e-6, 1 - 1e-6)
    on = np.concatenate([roll(q)[1:] for q in pieces]).astype(float)
    return float(-(on @ np.log(p) + (1 - on) @ np.log(1 - p)).mean())


def frames(pieces) -> int:
    """Predicted steps of a list of pieces: the terms a frame mean averages."""
    return sum(len(piece) - 1 for piece in pieces)


def music_file(tmp_path, seed=4):
    pieces = {"train": piano_pieces(6, seed), "valid": piano_pieces(3, seed + 1), "test": piano_pieces(4, seed + 2)}
    return write_music_mat(tmp_path / "rolls.mat", pieces), pieces


# each split against its own baseline ------------------------------------------------------------------------
def test_music_and_text_give_the_test_split_its_own_baseline(tmp_path):
    path, pieces = music_file(tmp_path)
    spec = PolyphonicMusic(dataset="jsb", path=str(path)).spec
    val, test = frequency_nll(pieces["train"], pieces["valid"]), frequency_nll(pieces["train"], pieces["test"])
    assert abs(val - test) > 0.1  # the two splits' baselines differ, so mixing them up shows
    # float64 both ways: products over 88 keys, then a mean over the split's frames
    assert (
        spec.baseline_for("val")
        == spec.baseline
        == pytest.approx(val, rel=roundoff(torch.float64, 88 + frames(pieces["valid"])))
    )
    assert spec.baseline_for("test") == pytest.approx(test, rel=roundoff(torch.float64, 88 + frames(pieces["test"])))
    text = CharText(path=str(write_text_set(tmp_path / "text", "aaab\n", "ab\n", "bbbb\n")), seq_len=2).spec
    assert text.baseline_for("test") > text.baseline_for("val")  # 'b' is rarer in training, the test text all 'b'


def test_a_test_run_stores_and_prints_the_test_splits_baseline(tmp_path, monkeypatch, capsys):
    path, pieces = music_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(
        [
            "test",
            "--config",
            MUSIC_DEMO,
            "--data.path",
            str(path),
            "--model.hidden_size",
            "4",
            "--db",
            db,
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.enable_model_summary",
            "false",
        ]
    )
    (run,) = Store(db).list_runs()
    expected = frequency_nll(pieces["train"], pieces["test"])
    # float64 both ways: products over 88 keys, then a mean over the test frames
    assert run.main_metric == "test/nll" and run.baseline == pytest.approx(
        expected, rel=roundoff(torch.float64, 88 + frames(pieces["test"]))
    )
    assert f"(baseline on the test split: {run.baseline:.4g})" in capsys.readouterr().out


# the evaluation loss weighs every frame alike --------------------------------------------------------------
@pytest.mark.parametrize("stage", ["validate", "test"])
def test_evaluation_loss_is_the_frame_weighted_nll(tmp_path, stage):
    # one long piece with every key on and one short silent piece, one per batch: their losses differ a lot, so a
    # mean over batches (pieces) and one over frames (the papers' figure) differ too
    long_loud, short_silent = [ALL_KEYS] * 9, [[]] * 3
    pieces = {"train": piano_pieces(4, 0), "valid": [long_loud, short_silent], "test": [short_silent, long_loud]}
    task = PolyphonicMusic(dataset="jsb", path=str(write_music_mat(tmp_path / "x.mat", pieces)), eval_batch_size=1)
    torch.manual_seed(0)
    module = RecurrentModule(task.spec, family="lstm", hidden_size=4)
    torch.nn.init.constant_(module.model.readout.bias, -5.0)  # every key predicted off: loud steps cost ~88 x 5
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    (results,) = getattr(trainer, stage)(module, datamodule=task)
    split = "val" if stage == "validate" else "test"
    loss, nll = results[f"{split}/loss"], results[f"{split}/nll"]
    with torch.no_grad():
        batch_losses = [
            float(module.objective.loss(module(x), y, m))
            for x, y, m in (task.dataset(split).batch([i]) for i in range(2))
        ]
    assert abs(np.mean(batch_losses) - nll) > 0.1 * nll  # the piece-weighted mean is far off
    # two float32 sums over the split's 10 frames of values up to ~440
    torch.testing.assert_close(torch.tensor(loss), torch.tensor(nll), **close(torch.float32, n=10, scale=nll))


# the music data set is told by its file ----------------------------------------------------------------------
def pieces_of_sizes(sizes, seed=0):
    return {key: piano_pieces(n, seed + i) for i, (key, n) in enumerate(zip(("train", "valid", "test"), sizes))}


def test_a_music_file_with_another_sets_split_sizes_is_refused_or_labelled_by_them(tmp_path):
    path = write_music_mat(tmp_path / "rolls.mat", pieces_of_sizes((87, 12, 25)))  # Piano-midi.de's splits
    with pytest.raises(ConfigError) as refused:
        PolyphonicMusic(dataset="jsb", path=str(path))
    message = str(refused.value)
    assert "data.dataset = 'jsb'" in message and "'piano'" in message and "87/12/25" in message
    assert str(path) in message and "\n" not in message
    inferred = PolyphonicMusic(path=str(path))  # no dataset: the file tells
    assert inferred.dataset_name == "piano" and inferred.spec.description.startswith("piano piano rolls")


def test_a_music_file_of_unknown_sizes_is_named_by_its_usual_name_or_by_data_dataset(tmp_path):
    sizes = (5, 2, 2)
    named = write_music_mat(tmp_path / "Nottingham.mat", pieces_of_sizes(sizes))
    assert PolyphonicMusic(path=str(named)).dataset_name == "nottingham"
    assert PolyphonicMusic(dataset="muse", path=str(named)).dataset_name == "muse"  # a subset: data.dataset says
    anonymous = write_music_mat(tmp_path / "rolls.mat", pieces_of_sizes(sizes))
    with pytest.raises(ConfigError, match=r"data.dataset is not set and .*rolls.mat .*set data.dataset"):
        PolyphonicMusic(path=str(anonymous))


# one step for a metric point, an analysis and a checkpoint of the same moment ---------------------------------
def test_a_val_point_an_eigenvalue_snapshot_and_the_best_checkpoint_share_a_step(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(
        [
            "fit",
            "--config",
            DEMO,
            *TINY,
            "--db",
            db,
            "--trainer.callbacks+=training.callbacks.EigenvalueSnapshots",
            "--trainer.callbacks.every_n_steps=3",
        ]
    )
    store = Store(db)
    (run,) = store.list_runs()
    val = store.metric_series(run.id, "val/loss")
    assert [p.step for p in val] == [3, 6]  # validation after 3 and 6 optimizer steps
    (path,) = (Path(store.get_run(run.id).run_dir) / "checkpoints").glob("best-step*.ckpt")
    step = int(path.stem.removeprefix("best-step"))
    assert torch.load(path, weights_only=False)["global_step"] == step
    module = RecurrentModule.load_from_checkpoint(path, weights_only=False).eval()

    # the val point at that step measured the checkpoint's weights
    point = next(p for p in val if p.step == step)
    inputs, targets = CopyingTask(seq_len=5, train_size=40, batch_size=10, val_size=20).make_split("val")
    with torch.no_grad():
        loss = module.objective.loss(module(inputs), targets)
    # one float32 mean over the split's 20 x 25 cross-entropy terms of size ~loss
    torch.testing.assert_close(torch.tensor(point.value), loss, **close(torch.float32, n=20 * 25, scale=float(loss)))

    # and so did the eigenvalue snapshot at that step
    (snapshot,) = [a for a in store.artifacts(run.id, EIGENVALUES) if a.step == step]
    stored = np.sort_complex(array_from_bytes(store.artifact_data(snapshot.id)))
    with torch.no_grad():
        w = module.model.layer.recurrent_matrix().double()
    recomputed = np.sort_complex(torch.linalg.eigvals(w).numpy())
    # eig of the same n = 8 matrix (norm 1, orthogonal) in float64; the snapshot's W was built in float32
    np.testing.assert_allclose(stored, recomputed, **close(torch.float32, n=8, scale=1.0))


def test_a_resume_keeps_the_evaluation_at_the_checkpoints_step(tmp_path):
    logger = SQLLogger(db_url=f"sqlite:///{tmp_path / 'runs.db'}", root_dir=str(tmp_path / "runs"))
    for step in (2, 3, 4):  # train/loss at s: the batch after the checkpoint of s, run again on resume
        logger.log_metrics({"train/loss": 1.0, "analysis/orthogonality": 0.0, "val/loss": float(step)}, step=step)
    trainer = SimpleNamespace(global_step=3, loggers=[logger], is_global_zero=True)
    ContinueRun().on_train_start(trainer, None)
    steps = {
        key: [p.step for p in logger.store.metric_series(logger.run_id, key)]
        for key in ("train/loss", "analysis/orthogonality", "val/loss")
    }
    assert steps == {"train/loss": [2], "analysis/orthogonality": [2], "val/loss": [2, 3]}
    assert logger.store.metric_series(logger.run_id, "val/loss")[1].value == 3.0
