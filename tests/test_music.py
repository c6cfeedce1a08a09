"""Polyphonic music: the real .mat splits, stand-in .mat and pickle files, next-step batches and the NLL objective."""

import fractions
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from standins import SHARED_DATA, piano_pieces, roll, write_music_mat, write_music_pickle
from tolerances import roundoff

from ortholab.cli.main import main
from ortholab.datamodules.music import PolyphonicMusic
from ortholab.datamodules.spec import TaskSpec
from ortholab.db import Store
from ortholab.errors import ConfigError
from ortholab.training.objectives import OBJECTIVES

# float32 frame NLL of positive terms: ~10 roundings a term (sigmoid, logs), 88 keys summed, <= 10 steps averaged
FRAME_NLL = roundoff(torch.float32, 10 + 88 + 10)

POLY = SHARED_DATA / "poly_music"


@pytest.mark.skipif(not POLY.is_dir(), reason="needs ../shared/data/poly_music")
@pytest.mark.parametrize(
    "dataset, counts, train_steps", [("jsb", (229, 76, 77), 13807), ("nottingham", (694, 173, 170), 176561)]
)
def test_real_mat_splits(dataset, counts, train_steps):
    task = PolyphonicMusic(dataset=dataset, path=str(POLY))
    assert tuple(task.pieces(s) for s in ("train", "val", "test")) == counts
    steps, starts, lengths = task.rolls["train"]
    assert steps.shape == (train_steps, 88) and steps.dtype == torch.bool and int(lengths.sum()) == train_steps
    assert task.spec.main_metric == "val/nll" and task.spec.loss == "frame_nll" and task.spec.baseline > 0


def splits(seed=0):
    return {"train": piano_pieces(6, seed), "valid": piano_pieces(3, seed + 1), "test": piano_pieces(2, seed + 2)}


def test_mat_and_pickle_give_the_same_rolls(tmp_path):
    pieces = splits()
    from_mat = PolyphonicMusic(dataset="jsb", path=str(write_music_mat(tmp_path / "JSB_Chorales.mat", pieces)))
    folder = tmp_path / "pickles"
    folder.mkdir()
    write_music_pickle(folder / "JSB Chorales.pickle", pieces)
    from_pickle = PolyphonicMusic(dataset="jsb", path=str(folder))  # found by its usual name in the folder
    for split in ("train", "val", "test"):
        for a, b in zip(from_mat.rolls[split], from_pickle.rolls[split]):
            assert torch.equal(a, b)
    expected = np.concatenate([roll(p) for p in pieces["valid"]]).astype(bool)
    assert np.array_equal(from_pickle.rolls["val"][0].numpy(), expected)


def test_next_step_batches_are_padded_with_a_mask(tmp_path):
    pieces = splits()
    task = PolyphonicMusic(dataset="nottingham", path=str(write_music_pickle(tmp_path / "n.pickle", pieces)))
    inputs, targets, mask = task.make_split("train")
    lengths = [len(p) for p in pieces["train"]]
    assert inputs.shape == (6, max(lengths) - 1, 88) and inputs.dtype == torch.float32
    assert mask.sum(dim=1).tolist() == [n - 1 for n in lengths]
    for i, piece in enumerate(pieces["train"]):
        full = torch.from_numpy(roll(piece)).float()
        n = len(piece) - 1
        assert torch.equal(inputs[i, :n], full[:-1]) and torch.equal(targets[i, :n], full[1:])
        assert inputs[i, n:].sum() == 0 and targets[i, n:].sum() == 0
    first = next(iter(task.train_dataloader()))
    assert len(first) == 3 and first[2].dtype == torch.bool


def test_frame_nll_sums_keys_and_averages_valid_steps():
    spec = TaskSpec(name="music", input_size=88, output_size=88, readout="every_step", loss="frame_nll")
    objective = OBJECTIVES["frame_nll"](spec)
    torch.manual_seed(0)
    outputs, targets = torch.randn(2, 5, 88), (torch.rand(2, 5, 88) > 0.9).float()
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    p = torch.sigmoid(outputs)
    per_step = -(targets * p.log() + (1 - targets) * (1 - p).log()).sum(-1)
    assert objective.loss(outputs, targets, mask).item() == pytest.approx(per_step[mask].mean().item(), rel=FRAME_NLL)
    changed = outputs.clone()
    changed[1, 2:] = 100.0  # padded steps do not count
    assert objective.loss(changed, targets, mask).item() == pytest.approx(objective.loss(outputs, targets, mask).item())
    metrics = objective.metrics()
    objective.update(metrics, outputs[:1], targets[:1], mask[:1])
    objective.update(metrics, outputs[1:], targets[1:], mask[1:])
    assert metrics["nll"].compute().item() == pytest.approx(per_step[mask].mean().item(), rel=FRAME_NLL)  # per step


def test_baseline_is_the_training_frequency_model(tmp_path):
    pieces = splits(seed=4)
    task = PolyphonicMusic(dataset="jsb", path=str(write_music_mat(tmp_path / "x.mat", pieces)))
    train = np.concatenate([roll(p) for p in pieces["train"]]).astype(float)
    p = np.clip(train.mean(0), 1e-6, 1 - 1e-6)
    targets = np.concatenate([roll(piece)[1:] for piece in pieces["valid"]]).astype(float)
    nll = -(targets @ np.log(p) + (1 - targets) @ np.log(1 - p)).mean()
    # float64: products over 88 keys, then a mean over the validation frames
    assert task.spec.baseline == pytest.approx(nll, rel=roundoff(torch.float64, 88 + len(targets)))
    logits = torch.logit(torch.from_numpy(p)).float().expand(1, 1, 88)
    _, t, mask = task.make_split("val")
    # float32 logits: |logit| <= ln(1e6) ~ 14 rounds by eps32 ln(1e6) in each key's term; 88 keys, the valid steps
    assert F.binary_cross_entropy_with_logits(logits.expand_as(t), t, reduction="none").sum(-1)[
        mask
    ].mean().item() == pytest.approx(
        nll, rel=roundoff(torch.float32, 88 + mask.sum().item(), scale=abs(math.log(1e-6)))
    )
    assert math.isfinite(task.spec.baseline)


def test_pickle_with_code_is_refused(tmp_path):
    path = tmp_path / "Nottingham.pickle"  # any class reference (here fractions.Fraction) could run code on load
    path.write_bytes(pickle.dumps({"train": [[[fractions.Fraction(60)]]], "valid": [], "test": []}))
    with pytest.raises(ConfigError, match="Nottingham.pickle cannot be read as a piano-roll pickle"):
        PolyphonicMusic(dataset="nottingham", path=str(path))


# values a piano roll cannot hold (issue 22) ----------------------------------------------------------------------
def write_float_mat(path, bad_value=None, piece_steps=6):
    """A .mat of float64 cells (as MATLAB writes them), the first training piece holding `bad_value` at (2, 40)."""
    import scipy.io

    rng = np.random.default_rng(0)
    cells = {}
    for key, count in (("traindata", 3), ("validdata", 2), ("testdata", 2)):
        cell = np.empty((1, count), dtype=object)
        for i in range(count):
            cell[0, i] = (rng.random((piece_steps, 88)) < 0.1).astype(np.float64)
        cells[key] = cell
    if bad_value is not None:
        cells["traindata"][0, 0][2, 40] = bad_value
    scipy.io.savemat(path, cells)
    return path


@pytest.mark.parametrize(
    "value, shown",
    [(5.0, "5.0"), (-3.0, "-3.0"), (1e9, "1000000000.0"), (math.nan, "nan"), (math.inf, "inf"), (0.5, "0.5")],
)
def test_a_piano_roll_value_other_than_0_or_1_is_refused_with_its_place(tmp_path, value, shown):
    path = write_float_mat(tmp_path / "JSB_Chorales.mat", value)
    with pytest.raises(ConfigError) as refused:
        PolyphonicMusic(dataset="jsb", path=str(path))
    assert f"{path}: traindata piece 0 holds {shown} at step 2, key 40 (1 such values)" in str(refused.value)


def test_a_float_roll_of_0_and_1_is_read_as_it_is(tmp_path):
    task = PolyphonicMusic(dataset="jsb", path=str(write_float_mat(tmp_path / "JSB_Chorales.mat")))
    assert task.pieces("train") == 3 and task.rolls["train"][0].dtype == torch.bool


def test_an_empty_mat_file_is_named(tmp_path):
    path = tmp_path / "JSB_Chorales.mat"
    path.write_bytes(b"")
    with pytest.raises(ConfigError, match=r"JSB_Chorales.mat is empty \(0 bytes\)"):
        PolyphonicMusic(dataset="jsb", path=str(path))
    path.write_bytes(b"MATLAB 5.0 MAT-file" + bytes(20))  # a truncated header
    with pytest.raises(ConfigError, match="cannot be read as a MATLAB file"):
        PolyphonicMusic(dataset="jsb", path=str(path))


@pytest.mark.parametrize(
    "piece, expected",
    [
        ([[60.5]], "holds the note 60.5"),
        ([["C4"]], "holds the note 'C4'"),
        ([[True]], "holds the note True"),
        ([60], "not a list of steps"),
        ([[200]], "holds MIDI note 200"),
    ],
)
def test_a_pickle_note_that_is_not_a_midi_number_is_refused(tmp_path, piece, expected):
    path = tmp_path / "JSB Chorales.pickle"
    with open(path, "wb") as stream:
        pickle.dump({"train": [piece], "valid": [[[60], [61]]], "test": [[[60], [61]]]}, stream)
    with pytest.raises(ConfigError, match=expected):
        PolyphonicMusic(dataset="jsb", path=str(path))


def test_evaluation_batches_group_pieces_of_similar_length_and_predict_keeps_the_stored_order(tmp_path):
    pieces = {"train": piano_pieces(3, 0), "valid": piano_pieces(11, 1), "test": piano_pieces(9, 2)}
    task = PolyphonicMusic(
        dataset="nottingham", path=str(write_music_pickle(tmp_path / "n.pickle", pieces)), eval_batch_size=3
    )
    for split, loader in (("valid", task.val_dataloader()), ("test", task.test_dataloader())):
        batches = list(loader)
        valid_steps = [mask.sum(dim=1).tolist() for _, _, mask in batches]
        served = [n for steps in valid_steps for n in steps]
        assert sorted(served) == sorted(len(p) - 1 for p in pieces[split])  # every piece once
        assert served == sorted(served)  # each batch's longest is at most the next batch's shortest
        rolls = sorted((roll(p) for p in pieces[split]), key=len)  # stable: stored order among equal lengths
        for (inputs, _, _mask), first in zip(batches, range(0, len(rolls), 3)):
            for row, full in zip(range(len(inputs)), rolls[first : first + 3]):
                assert torch.equal(inputs[row, : len(full) - 1], torch.from_numpy(full[:-1]).float())
    predicted = [mask.sum(dim=1).tolist() for _, _, mask in task.predict_dataloader()]
    assert [n for steps in predicted for n in steps] == [len(p) - 1 for p in pieces["test"]]


def test_a_data_path_relative_to_the_start_folder_is_recorded_absolute_so_the_run_reads_it_from_anywhere(
    tmp_path, monkeypatch, capsys
):
    """`fit --data.path rolls.mat` in one folder; the run's config.yaml names the file absolutely, so a resume or
    `test --config` of it from another folder reads the same pieces."""
    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    start.mkdir(), elsewhere.mkdir()
    write_music_mat(start / "rolls.mat", splits())
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    quiet = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    monkeypatch.chdir(start)
    main(
        [
            "fit",
            "--model.family",
            "lstm",
            "--model.hidden_size",
            "8",
            "--data",
            "PolyphonicMusic",
            "--data.dataset",
            "jsb",
            "--data.path",
            "rolls.mat",
            "--data.batch_size",
            "3",
            "--trainer.max_steps",
            "2",
            "--trainer.accelerator",
            "cpu",
            "--db",
            db,
            "--runs_dir",
            str(tmp_path / "runs"),
            *quiet,
        ]
    )
    config = Path(Store(db).get_run(1).run_dir) / "config.yaml"
    assert yaml.safe_load(config.read_text())["data"]["init_args"]["path"] == str(start / "rolls.mat")
    monkeypatch.chdir(elsewhere)
    main(["test", "--config", str(config), "--db", db, *quiet])
    capsys.readouterr()
    tested = [run for run in Store(db).list_runs() if run.stage == "test"]
    assert len(tested) == 1 and tested[0].status == "finished"
