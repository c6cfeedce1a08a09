"""Copying and adding data: layout, seeds, and the analytic baselines from the baseline strategies."""

import math

import pytest
import torch
import torch.nn.functional as F
from tolerances import roundoff

from ortholab.datamodules.adding import ADDING_BASELINE, AddingTask, adding_batch
from ortholab.datamodules.copying import MARKER, CopyingTask, copying_baseline
from ortholab.errors import ConfigError


def test_copying_layout():
    task = CopyingTask(seq_len=30, train_size=64, val_size=16, test_size=16)
    x, y = task.make_split("train")
    assert x.shape == y.shape == (64, 30 + 20)
    assert ((x[:, :10] >= 1) & (x[:, :10] <= 8)).all()
    assert (x[:, 10:39] == 0).all() and (x[:, 39] == MARKER).all() and (x[:, 40:] == 0).all()
    assert (y[:, :40] == 0).all() and torch.equal(y[:, 40:], x[:, :10])
    assert task.spec.input_size == 10 and task.spec.output_size == 9 and task.spec.symbolic


def test_copying_seeds_are_reproducible_and_splits_differ():
    a, b = CopyingTask(seq_len=5, train_size=32, val_size=32), CopyingTask(seq_len=5, train_size=32, val_size=32)
    assert torch.equal(a.make_split("train")[0], b.make_split("train")[0])
    assert not torch.equal(a.make_split("train")[0], a.make_split("val")[0])
    assert not torch.equal(
        a.make_split("train")[0], CopyingTask(seq_len=5, train_size=32, seed=1).make_split("train")[0]
    )


def test_copying_baseline_strategy_scores_the_baseline():
    # blank until the marker, then uniform over the 8 data symbols: CE = 10 ln 8 / (T + 20)
    task = CopyingTask(seq_len=100, val_size=200)
    x, y = task.make_split("val")
    logits = torch.full((*y.shape, 9), -1e4)
    logits[:, :-10, 0] = 0.0
    logits[:, -10:, 1:] = 0.0
    ce = F.cross_entropy(logits.reshape(-1, 9), y.reshape(-1)).item()
    assert ce == pytest.approx(10 * math.log(8) / 120, rel=roundoff(torch.float32, y.numel()))  # float32 mean of 24,000
    assert task.spec.baseline == pytest.approx(copying_baseline(100)) == pytest.approx(0.17329, abs=1e-5)


def test_copying_fresh_batches_change_every_epoch():
    task = CopyingTask(seq_len=5, batch_size=4, train_size=8, fresh_batches=True)
    loader = task.train_dataloader()
    first = list(loader)
    task.fit_progress = lambda: (1, 0)  # the trainer moved on to epoch 1
    second = list(loader)
    assert len(first) == 2 and first[0][0].shape == (4, 25)
    assert not torch.equal(first[0][0], second[0][0])
    again = list(CopyingTask(seq_len=5, batch_size=4, train_size=8, fresh_batches=True).train_dataloader())
    assert torch.equal(first[0][0], again[0][0])


def test_the_srnn_codes_ten_copying_classes_change_only_the_output_size():
    nine, ten = CopyingTask(seq_len=5), CopyingTask(seq_len=5, output_classes=10)
    assert (nine.spec.output_size, ten.spec.output_size) == (9, 10) and nine.spec.baseline == ten.spec.baseline
    assert all(torch.equal(a, b) for a, b in zip(nine.make_split("val"), ten.make_split("val")))
    with pytest.raises(ConfigError, match=r"data.output_classes = 8; 9 \(blank and the 8 symbols"):
        CopyingTask(seq_len=5, output_classes=8)


def test_adding_layout():
    x, y = adding_batch(500, 50, torch.Generator().manual_seed(0))
    assert x.shape == (500, 50, 2) and y.shape == (500, 1)
    markers = x[..., 1]
    assert (markers.sum(1) == 2).all()
    half = (50 - 1) // 2
    assert (markers[:, :half].sum(1) == 1).all() and (markers[:, half:].sum(1) == 1).all()
    torch.testing.assert_close(y[:, 0], (x[..., 0] * markers).sum(1))
    assert ((x[..., 0] >= 0) & (x[..., 0] < 1)).all()


@pytest.mark.parametrize("layout, first, second", [("scornn", (0, 24), (25, 50)), ("srnn", (0, 24), (25, 49))])
def test_adding_markers_fall_where_each_papers_code_puts_them(layout, first, second):
    """T = 51: the scoRNN code's first marker in {0..24}, second in {25..50}; the SRNN code's second in {25..49}
    (2 floor(T/2) = 50 excluded), so an odd T never marks its last step there."""
    x, y = adding_batch(4000, 51, torch.Generator().manual_seed(0), layout)
    steps = x[..., 1].nonzero()[:, 1].view(-1, 2)  # each row's two marked steps, in order
    assert (steps[:, 0].min().item(), steps[:, 0].max().item()) == first
    assert (steps[:, 1].min().item(), steps[:, 1].max().item()) == second
    torch.testing.assert_close(y[:, 0], (x[..., 0] * x[..., 1]).sum(1))
    with pytest.raises(ConfigError, match=r"data.markers = 'both'; choose one of \['scornn', 'srnn'\]"):
        AddingTask(seq_len=51, markers="both")


def test_adding_baseline_strategy_scores_the_baseline():
    task = AddingTask(seq_len=50, val_size=10_000)
    _, y = task.make_split("val")
    mse = F.mse_loss(torch.ones_like(y), y).item()  # always answer 1
    assert mse == pytest.approx(ADDING_BASELINE, abs=0.006) and task.spec.baseline == pytest.approx(0.1667, abs=1e-4)


@pytest.mark.parametrize(
    "task_cls, key, value",
    [
        (CopyingTask, "seq_len", 0),
        (CopyingTask, "seq_len", -3),
        (AddingTask, "seq_len", 0),
        (AddingTask, "batch_size", 0),
    ],
)
def test_non_positive_sizes_name_the_key(task_cls, key, value):
    with pytest.raises(ConfigError, match=rf"data\.{key}"):
        task_cls(**{key: value})


def test_train_loader_resumes_mid_epoch_with_the_same_batches():
    from ortholab.datamodules.base import ResumableLoader

    for shuffle in (False, True):
        task = AddingTask(seq_len=5, train_size=40, batch_size=10, shuffle=shuffle)
        task.fit_progress = lambda: (3, 2)  # epoch 3, two batches trained on when the checkpoint was taken
        loader = task.train_dataloader()
        assert isinstance(loader, ResumableLoader) and loader.state_dict() == {"completed": 2}
        full = [x for x, _ in loader]
        resumed = task.train_dataloader()
        resumed.load_state_dict(loader.state_dict())
        rest = [x for x, _ in resumed]
        assert len(rest) == 2 and all(torch.equal(a, b) for a, b in zip(rest, full[2:]))
        assert len([x for x, _ in resumed]) == 4  # later passes are whole epochs again
