"""Sequence generation: excerpts cut from a mono audio file, the two input settings, and the NMSE objective."""

import re

import numpy as np
import pytest
import torch
from standins import SHARED_DATA, write_audio
from tolerances import roundoff

from ortholab.datamodules.generation import SequenceGeneration
from ortholab.datamodules.spec import TaskSpec
from ortholab.errors import ConfigError
from ortholab.training.objectives import OBJECTIVES


def tone(n=2000, rate=8000):
    t = np.arange(n) / rate
    return 0.5 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 97 * t)


@pytest.mark.parametrize("suffix", [".wav", ".flac"])
def test_consecutive_excerpts_with_constant_inputs(tmp_path, suffix):
    path = write_audio(tmp_path / f"tone{suffix}", tone(), 8000)
    task = SequenceGeneration(
        path=str(path), sample_rate=8000, start=100, excerpt_samples=50, num_excerpts=3, peak_normalize=False
    )
    inputs, targets = task.make_split("train")
    assert inputs.shape == targets.shape == (3, 50, 1) and inputs.eq(1).all()
    expected = torch.from_numpy(tone()[100:250].reshape(3, 50, 1)).float()
    # the 16-bit quantisation step (libsndfile floors: errors fill [0, 1) step, so the bound is nearly met), and the
    # float32 rounding of values <= 1
    assert torch.allclose(targets, expected, atol=1 / 32768 + roundoff(torch.float32))
    for split in ("val", "test"):  # the task is to fit the excerpts themselves
        assert torch.equal(task.make_split(split)[1], targets)
    assert task.spec.baseline == 1.0 and task.spec.main_metric == "val/nmse"


def test_teacher_forcing_and_peak_normalisation(tmp_path):
    path = write_audio(tmp_path / "tone.wav", tone(), 8000)
    task = SequenceGeneration(path=str(path), excerpt_samples=40, num_excerpts=2, inputs="previous_sample")
    inputs, targets = task.make_split("train")
    assert targets.abs().max().item() == pytest.approx(1.0)
    assert torch.equal(inputs[:, 1:], targets[:, :-1]) and inputs[:, 0].eq(0).all()


def test_nmse_scores_the_mean_as_one():
    spec = TaskSpec(name="generation", input_size=1, output_size=1, readout="every_step", loss="nmse")
    objective = OBJECTIVES["nmse"](spec)
    targets = torch.from_numpy(tone(300)).float().view(2, 150, 1)
    metrics = objective.metrics()
    objective.update(metrics, torch.full_like(targets, targets.mean().item()), targets)
    # float32 means of squares over N = 300 samples, twice (the error and the variance)
    assert metrics["nmse"].compute().item() == pytest.approx(1.0, rel=roundoff(torch.float32, 2 * 300))
    noisy = targets + 0.1 * torch.randn_like(targets)
    expected = ((noisy - targets) ** 2).mean() / targets.var(unbiased=False)
    metrics = objective.metrics()
    objective.update(metrics, noisy[:1], targets[:1])
    objective.update(metrics, noisy[1:], targets[1:])  # pooled over the split, not averaged per batch
    assert metrics["nmse"].compute().item() == pytest.approx(expected.item(), rel=roundoff(torch.float32, 2 * 300))
    loss = ((noisy - targets) ** 2).mean().item()
    assert objective.loss(noisy, targets).item() == pytest.approx(loss, rel=roundoff(torch.float32, 300))  # one mean


@pytest.mark.skipif(not (SHARED_DATA / "fsdd").is_dir(), reason="needs ../shared/data/fsdd")
def test_reads_an_fsdd_recording():
    task = SequenceGeneration(
        path=str(SHARED_DATA / "fsdd/recordings/0_jackson_0.wav"), sample_rate=8000, start=1300, excerpt_samples=320
    )
    _, targets = task.make_split("train")
    assert targets.shape == (1, 320, 1) and targets.abs().max().item() == pytest.approx(1.0)


@pytest.mark.parametrize("name,said", [("nope.wav", "does not exist"), (".", "is a folder, not an audio file")])
def test_a_path_that_is_no_file_says_what_is_there(tmp_path, name, said):
    """A missing file read 'is not an audio file', as if it were there in another format (walk-through of
    docs/tasks.md)."""
    expected = f"data.path = '{tmp_path / name}' {said}; give a mono WAV/FLAC file"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        SequenceGeneration(path=str(tmp_path / name)).make_split("train")
