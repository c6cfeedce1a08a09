"""SQLLogger under a real Lightning Trainer, on a real SQLite file."""

import os
import pickle
from argparse import Namespace

import lightning as L
import pytest
import torch
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.data import DataLoader, TensorDataset

from ortholab.db import SQLLogger, Store

MAX_STEPS = 6  # 4 batches per epoch: steps 0-3 in epoch 0, 4-5 in epoch 1


class Regression(L.LightningModule):
    """A linear regression on random data that logs train/loss every step and val/loss on validation."""

    def __init__(self, lr: float = 0.1, hidden: int = 3, crash_at: int | None = None, **extra):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        if self.global_step == self.hparams.crash_at:
            raise RuntimeError("boom")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def fit(model: L.LightningModule, logger: SQLLogger) -> None:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g))
    trainer = L.Trainer(
        max_steps=MAX_STEPS,
        accelerator="cpu",
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        val_check_interval=2,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, DataLoader(data, batch_size=8), DataLoader(data, batch_size=16))


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'ortholab.db'}"


@pytest.fixture
def logger(db_url, tmp_path):
    return SQLLogger(db_url=db_url, name="regression", root_dir=str(tmp_path / "runs"), tags=["test"])


def test_fit_records_a_finished_run(logger, db_url, tmp_path):
    logger.describe_run(family="linear", task="regression", main_metric="val/loss", parameter_count=5)
    fit(Regression(lr=0.1, hidden=3, _instantiator="cli.Instantiator"), logger)

    store = Store(db_url)
    [summary] = store.list_runs()
    run = store.get_run(summary.id)
    assert logger.version == str(run.id) and logger.run_id == run.id
    assert (run.name, run.status, run.family, run.task, run.tags) == (
        "regression",
        "finished",
        "linear",
        "regression",
        ("test",),
    )
    assert run.ended_at is not None and run.parameter_count == 5
    folder = os.path.join(str(tmp_path / "runs"), f"store-{store.store_id[:8]}", "regression", str(run.id))
    assert run.run_dir == os.path.abspath(folder)  # the store's own folder: another store's run 1 lies elsewhere
    assert os.path.isdir(run.run_dir) and logger.log_dir == folder

    train = store.metric_series(run.id, "train/loss")
    assert [p.step for p in train] == list(range(MAX_STEPS))
    assert [p.epoch for p in train] == [0, 0, 0, 0, 1, 1]
    val = store.metric_series(run.id, "val/loss")
    assert [(p.step, p.epoch) for p in val] == [(1, 0), (3, 0), (5, 1)]  # after batches 2, 4 and 6
    assert store.metric_keys(run.id) == ["train/loss", "val/loss"]  # 'epoch' is a column, not a metric
    assert summary.steps == MAX_STEPS - 1
    assert summary.best == min(p.value for p in val) and summary.last == val[-1].value

    assert run.params == {"lr": 0.1, "hidden": 3, "crash_at": None}  # '_instantiator' dropped


def test_crash_marks_run_failed_and_keeps_points(logger, db_url):
    with pytest.raises(RuntimeError, match="boom"):
        fit(Regression(crash_at=3), logger)
    store = Store(db_url)
    [run] = store.list_runs()
    assert run.status == "failed" and run.ended_at is not None
    assert [p.step for p in store.metric_series(run.id, "train/loss")] == [0, 1, 2]


def test_log_hyperparams_namespaces_and_private_keys(logger, db_url):
    logger.log_hyperparams(Namespace(lr=0.5, _class_path="x.Y", model=Namespace(width=4, _instantiator="z")))
    logger.log_hyperparams({"optim": {"name": "rmsprop", "_skip": 1}, "lr": 0.25})
    assert Store(db_url).get_run(logger.run_id).params == {"lr": 0.25, "model.width": 4, "optim.name": "rmsprop"}


def test_log_config(logger, db_url):
    config = {"model": {"class_path": "models.ScoRNN", "init_args": {"hidden_size": 170}}, "seed_everything": 3}
    logger.log_config(config)
    run = Store(db_url).get_run(logger.run_id)
    assert run.config == config
    assert run.params["model.init_args.hidden_size"] == 170 and run.params["seed_everything"] == 3


def test_log_metrics_converts_tensors_and_epoch(logger, db_url):
    logger.log_metrics({"loss": torch.tensor(0.5), "epoch": 2.0}, step=7)
    [point] = Store(db_url).metric_series(logger.run_id, "loss")
    assert (point.step, point.epoch, point.value) == (7, 2, 0.5)
    assert isinstance(point.epoch, int)


def test_finalize_status_mapping(logger, db_url):
    store = Store(db_url)
    logger.finalize("success")
    assert store.get_run(logger.run_id).status == "finished"
    logger.finalize("success")  # a second call is harmless
    logger.finalize("aborted")
    assert store.get_run(logger.run_id).status == "interrupted"
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        logger.finalize("failed")  # how Lightning reports Ctrl+C
    assert store.get_run(logger.run_id).status == "interrupted"
    logger.finalize("failed")
    assert store.get_run(logger.run_id).status == "failed"


def test_finalize_after_unopenable_store_keeps_original_error(tmp_path):
    (tmp_path / "afile").write_text("")
    logger = SQLLogger(db_url=f"sqlite:///{tmp_path / 'afile' / 'x.db'}")
    with pytest.warns(UserWarning, match="--db"):
        logger.finalize("failed")  # warns instead of masking the exception being handled


def test_other_ranks_never_touch_the_database(db_url, tmp_path, monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    logger = SQLLogger(db_url=db_url, root_dir=str(tmp_path / "runs"))
    assert logger.version == "pending" and logger.run_id is None
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.log_hyperparams({"lr": 0.1})
    logger.finalize("success")
    assert not (tmp_path / "ortholab.db").exists() and not (tmp_path / "runs").exists()


def test_pickles_after_writing(logger, db_url):
    logger.log_metrics({"loss": 1.0}, step=0)
    copy = pickle.loads(pickle.dumps(logger))
    assert copy.run_id == logger.run_id  # the copy carries on the same run
    copy.log_metrics({"loss": 0.5}, step=1)
    assert [p.value for p in Store(db_url).metric_series(logger.run_id, "loss")] == [1.0, 0.5]
