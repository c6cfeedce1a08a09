"""The R-Transformer music script's training semantics: the summed frame NLL it backpropagates
(model.loss_reduction: sum), its learning-rate drop when validation stalls (DropLearningRateOnStall) and its
piece order (data.shuffle: numpy)."""

import copy
import types

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.trainer.states import TrainerFn
from standins import piano_pieces, write_music_pickle
from tolerances import close, norm

from ortholab.datamodules import CopyingTask
from ortholab.datamodules.music import PolyphonicMusic
from ortholab.errors import ConfigError
from ortholab.training.callbacks.lr_drop import DropLearningRateOnStall
from ortholab.training.module import RecurrentModule


class _FirstStep(pl.Callback):
    """The first training batch and every parameter's gradient when the optimizer steps on it."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batch = [t.clone() for t in batch]

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads = {name: p.grad.clone() for name, p in pl_module.named_parameters()}


def test_summed_loss_backpropagates_the_scripts_sum_over_valid_frames(tmp_path):
    pieces = {"train": piano_pieces(4, 0), "valid": piano_pieces(2, 1), "test": piano_pieces(2, 2)}
    task = PolyphonicMusic(
        dataset="nottingham", path=str(write_music_pickle(tmp_path / "n.pickle", pieces)), batch_size=4
    )  # pieces of 3 to 8 steps in one batch: padded, with a mask
    torch.manual_seed(0)
    module = RecurrentModule(
        task.spec,
        family="rnn",
        hidden_size=8,
        loss_reduction="sum",
        optimizers={"default": {"name": "sgd", "lr": 1e-3}},
    )
    reference = copy.deepcopy(module)
    seen = _FirstStep()
    trainer = pl.Trainer(
        max_steps=1,
        logger=False,
        callbacks=[seen],
        accelerator="cpu",
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(module, datamodule=task)
    inputs, targets, mask = seen.batch
    assert not mask.all()  # the batch has padding, which the sum must leave out
    # the script's loss: -trace(y log(p)^T + (1 - y) log(1 - p)^T) per piece, i.e. every valid frame and key summed
    per_key = F.binary_cross_entropy_with_logits(reference(inputs), targets, reduction="none")
    per_key[mask].sum().backward()
    terms = int(mask.sum()) * 88
    for name, p in reference.named_parameters():
        # float32: the sum over its terms (valid frames x 88 keys) and the BPTT's ~T*h products, in another order
        torch.testing.assert_close(
            seen.grads[name], p.grad, **close(torch.float32, terms + mask.shape[1] * 8, scale=norm(p.grad))
        )


def test_summed_loss_is_refused_where_the_loss_is_no_mean_over_steps():
    task = CopyingTask(seq_len=5, train_size=10, batch_size=10, val_size=10)
    with pytest.raises(ConfigError, match="model.loss_reduction: sum .* 'cross_entropy'"):
        RecurrentModule(task.spec, family="rnn", hidden_size=8, loss_reduction="sum")
    with pytest.raises(ConfigError, match="model.loss_reduction = 'total'"):
        RecurrentModule(task.spec, family="rnn", hidden_size=8, loss_reduction="total")


def _validate(callback, optimizer, value, step):
    trainer = types.SimpleNamespace(
        sanity_checking=False,
        state=types.SimpleNamespace(fn=TrainerFn.FITTING),
        callback_metrics={"val/nll": torch.tensor(value)},
        optimizers=[optimizer],
        global_step=step,
    )
    callback.on_validation_end(trainer, None)
    return optimizer.param_groups[0]["lr"]


def _official_drops(values, lr=1.0):
    """The script's loop, transcribed: after each epoch `ep` (1-based), if ep > 10 and the validation loss is above
    max(vloss_list[-3:]), lr /= 10; then the loss is appended. The learning rate after each epoch."""
    vloss_list, rates = [], []
    for ep, vloss in enumerate(values, start=1):
        if ep > 10 and vloss > max(vloss_list[-3:]):
            lr /= 10
        vloss_list.append(vloss)
        rates.append(lr)
    return rates


@pytest.mark.parametrize("seed", range(5))
def test_learning_rate_drops_at_the_epochs_the_script_drops_it(seed):
    rng = np.random.default_rng(seed)
    values = (10 / np.arange(1, 41) + rng.normal(0, 0.3, 40)).tolist()  # falling, noisy: some rises, some early
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    callback = DropLearningRateOnStall(monitor="val/nll", after=10, window=3, factor=0.1)
    rates = [_validate(callback, optimizer, v, step) for step, v in enumerate(values)]
    expected = _official_drops(values)
    # one factor of 0.1 per drop: k multiplications by a float32-rounded 0.1 against k exact divisions by 10
    np.testing.assert_allclose(rates, expected, rtol=len(callback.drops) * 2 * np.finfo(np.float32).eps)
    assert callback.drops == [step for step in range(40) if rates[step] < (rates[step - 1] if step else 1.0)]


@pytest.mark.parametrize("rise_at, drops", [(10, [10]), (9, [])])  # 0-based: the 11th validation is the first
def test_the_first_validation_that_may_drop_is_the_eleventh(rise_at, drops):  # that may drop ("ep > 10")
    values = [10.0 - i for i in range(12)]
    values[rise_at] = 20.0
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    callback = DropLearningRateOnStall(monitor="val/nll")
    for step, v in enumerate(values):
        _validate(callback, optimizer, v, step)
    assert callback.drops == drops == [i for i, r in enumerate(_official_drops(values)) if r < 1.0][:1]


def test_a_resumed_callback_drops_as_the_uninterrupted_one():
    values = [5.0, 4.0, 3.5, 3.0, 2.8, 2.6, 2.5, 2.4, 2.3, 2.2, 2.25, 2.3, 2.1, 2.35, 2.0]
    whole = DropLearningRateOnStall(monitor="val/nll")
    opt_whole = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    for step, v in enumerate(values):
        _validate(whole, opt_whole, v, step)
    first = DropLearningRateOnStall(monitor="val/nll")
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    for step, v in enumerate(values[:12]):
        _validate(first, opt, v, step)
    resumed = DropLearningRateOnStall(monitor="val/nll")
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))  # as Lightning restores it from the checkpoint
    for step, v in enumerate(values[12:], start=12):
        _validate(resumed, opt, v, step)  # (the optimizer's rate comes back with its own state)
    assert resumed.drops == whole.drops == [13] and opt.param_groups[0]["lr"] == opt_whole.param_groups[0]["lr"]


def test_a_missing_metric_names_the_ones_there():
    callback = DropLearningRateOnStall(monitor="val/nl")
    trainer = types.SimpleNamespace(
        sanity_checking=False,
        state=types.SimpleNamespace(fn=TrainerFn.FITTING),
        callback_metrics={"val/nll": torch.tensor(1.0), "val/loss": torch.tensor(1.0)},
    )
    with pytest.raises(ConfigError, match=r"no metric 'val/nl'.*\['val/loss', 'val/nll'\]"):
        callback.on_validation_end(trainer, None)


def _script_orders(seed: int, size: int, epochs: int) -> list[list[int]]:
    """The R-Transformer music script's piece order, transcribed: np.random.seed(args.seed) once (line 32), then at
    every epoch `train_idx_list = np.arange(len(X_train), dtype="int32"); np.random.shuffle(train_idx_list)`."""
    saved = np.random.get_state()
    try:
        np.random.seed(seed)
        orders = []
        for _ in range(epochs):
            train_idx_list = np.arange(size, dtype="int32")
            np.random.shuffle(train_idx_list)
            orders.append(train_idx_list.tolist())
        return orders
    finally:
        np.random.set_state(saved)


def test_numpy_shuffle_serves_the_scripts_piece_order_and_resumes_it(tmp_path):
    pieces = {"train": piano_pieces(13, 0), "valid": piano_pieces(2, 1), "test": piano_pieces(2, 2)}
    path = str(write_music_pickle(tmp_path / "n.pickle", pieces))
    stored = PolyphonicMusic(dataset="nottingham", path=path, shuffle=False)
    stored.fit_progress = lambda: (0, 0)
    by_index = [batch[0] for batch in stored.train_dataloader()]  # piece i is batch i of the stored order
    task = PolyphonicMusic(dataset="nottingham", path=path, shuffle="numpy", seed=1111)
    expected = _script_orders(1111, 13, 4)
    assert len({tuple(order) for order in expected}) == 4  # every epoch its own order
    for epoch in range(4):
        task.fit_progress = lambda epoch=epoch: (epoch, 0)
        served = [batch[0] for batch in task.train_dataloader()]
        assert all(torch.equal(got, by_index[i]) for got, i in zip(served, expected[epoch], strict=True))
    task.fit_progress = lambda: (2, 5)  # a checkpoint after 5 pieces of the third epoch
    resumed = task.train_dataloader()
    resumed.load_state_dict(resumed.state_dict())
    rest = [batch[0] for batch in resumed]
    assert all(torch.equal(got, by_index[i]) for got, i in zip(rest, expected[2][5:], strict=True))


def test_an_unknown_shuffle_names_the_key_and_the_choices(tmp_path):
    pieces = {"train": piano_pieces(3, 0), "valid": piano_pieces(2, 1), "test": piano_pieces(2, 2)}
    with pytest.raises(ConfigError, match=r"data\.shuffle = 'random'.*numpy"):
        PolyphonicMusic(
            dataset="nottingham", path=str(write_music_pickle(tmp_path / "n.pickle", pieces)), shuffle="random"
        )
