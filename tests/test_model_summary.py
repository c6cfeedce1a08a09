"""The layer table a run prints: no 'Total FLOPs: 0' (Lightning counts FLOPs only for a model with an example input,
which no family has); counted FLOPs and a summary the user configured are kept."""

from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelSummary, RichModelSummary

from ortholab.training.model_summary import LayerSummary, replace_lightnings_summary


class Tiny(pl.LightningModule):
    def __init__(self, example: bool):
        super().__init__()
        self.layer = torch.nn.Linear(3, 2)
        self.example_input_array = torch.zeros(1, 3) if example else None

    def forward(self, x):
        return self.layer(x)


def printed_summary(capsys, module) -> str:
    summary = LayerSummary()
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, callbacks=[summary])
    summary.on_fit_start(trainer, module)
    return capsys.readouterr().out


def test_a_module_without_an_example_input_prints_its_parameters_and_no_flops(capsys):
    out = printed_summary(capsys, Tiny(example=False))
    assert "Total params: 8" in out and "layer" in out and "Linear" in out, out
    assert "FLOPs" not in out, out  # Lightning's own printed 'FLOPs' as a column of 0s and 'Total FLOPs: 0'


def test_counted_flops_are_shown(capsys):
    out = printed_summary(capsys, Tiny(example=True))
    assert "Total FLOPs" in out and "FLOPs" in out.splitlines()[1], out  # 2·3·2 = 12 for one forward of (1, 3)
    assert "Total FLOPs (one forward of the example input): 12" in out, out


def test_only_lightnings_own_summary_is_replaced():
    mine = ModelSummary(max_depth=3)
    other = object()
    assert replace_lightnings_summary([mine, other], configured=[mine]) == [mine, other]
    replaced = replace_lightnings_summary([RichModelSummary(), other], configured=[])
    assert type(replaced[0]) is LayerSummary and replaced[1] is other


def test_a_run_prints_its_layers_without_a_flops_count(tmp_path, capsys):
    from ortholab.cli.main import main

    demo = str(Path(__file__).resolve().parents[1] / "configs" / "demo" / "copying_scornn.yaml")
    store = ["--db", f"sqlite:///{tmp_path / 'store.db'}", "--runs_dir", str(tmp_path / "runs")]
    main(["fit", "--config", demo, "--trainer.max_steps", "1", "--trainer.enable_progress_bar", "false", *store])
    out = capsys.readouterr().out
    assert "Total params: 21.8 K" in out and "SequenceModel" in out and "FLOPs" not in out, out
