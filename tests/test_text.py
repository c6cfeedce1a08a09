"""Character text: file layouts and formats, vocabulary with <unk>, windows and lines, shift, bits per character."""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from standins import write_text_set
from tolerances import roundoff

from ortholab.cli.main import main
from ortholab.datamodules.spec import TaskSpec
from ortholab.datamodules.text import UNKNOWN, CharText
from ortholab.db import Store
from ortholab.training.objectives import OBJECTIVES

TRAIN = "the cat sat on the mat\nno cat here\nthe end of the text\n"
VALID = "a cat sat\nzebra\n"
TEST = "the mat\nthat cat\n"


def test_vocabulary_from_training_text_with_unknown(tmp_path):
    task = CharText(path=str(write_text_set(tmp_path, TRAIN, VALID, TEST)), seq_len=4)
    vocab = task.vocabulary
    assert vocab.symbols == [UNKNOWN, *sorted(set(TRAIN))]
    assert task.spec.input_size == task.spec.output_size == len(vocab) and task.spec.symbolic
    val_text = VALID  # windows layout keeps line ends
    ids = task.ids["val"]
    assert len(ids) == len(val_text)
    for char, i in zip(val_text, ids.tolist()):
        assert (i == 0) == (char not in TRAIN) and (i == 0 or vocab.symbols[i] == char)  # 'z', 'b' are unknown


def test_char_format_reads_as_the_plain_text(tmp_path):
    plain = CharText(path=str(write_text_set(tmp_path / "plain", TRAIN, VALID, TEST)), seq_len=4)
    names = ("ptb.char.train.txt", "ptb.char.valid.txt", "ptb.char.test.txt")
    char = CharText(
        path=str(write_text_set(tmp_path / "char", TRAIN, VALID, TEST, names=names, char_format=True)), seq_len=4
    )
    assert char.file_format == "char" and plain.file_format == "plain"
    assert char.vocabulary.symbols == plain.vocabulary.symbols
    for split in ("train", "val", "test"):
        assert torch.equal(char.ids[split], plain.ids[split])


def test_plain_format_never_takes_the_spaced_files_and_refuses_a_folder_of_only_them(tmp_path):
    """The oRNN configs read ptb.*.txt as plain text; the spaced ptb.char.*.txt read as plain are another task
    (another vocabulary and baseline), which a folder holding both, or only them, once trained in silence."""
    from ortholab.errors import ConfigError

    chars = ("ptb.char.train.txt", "ptb.char.valid.txt", "ptb.char.test.txt")
    both = write_text_set(tmp_path / "both", TRAIN, VALID, TEST, names=chars, char_format=True)
    write_text_set(both, TRAIN, VALID, TEST, names=("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"))
    task = CharText(path=str(both), seq_len=4, file_format="plain")
    assert task.files["train"].name == "ptb.train.txt" and "_" not in task.vocabulary.symbols
    assert CharText(path=str(both), seq_len=4).files["train"].name == "ptb.char.train.txt"  # auto: as before
    only_spaced = write_text_set(tmp_path / "spaced", TRAIN, VALID, TEST, names=chars, char_format=True)
    with pytest.raises(ConfigError, match="holds ptb.char.*but data.file_format is plain, which reads ptb.train.txt"):
        CharText(path=str(only_spaced), seq_len=4, file_format="plain")


@pytest.mark.parametrize("shift", [1, 5])
def test_windows_predict_shift_steps_ahead(tmp_path, shift):
    task = CharText(path=str(write_text_set(tmp_path, TRAIN, VALID, TEST)), seq_len=7, shift=shift, batch_size=3)
    inputs, targets = task.make_split("train")
    ids = task.ids["train"]
    count = (len(ids) - shift) // 7
    assert inputs.shape == targets.shape == (count, 7)
    assert torch.equal(inputs.reshape(-1), ids[: count * 7])
    assert torch.equal(targets.reshape(-1), ids[shift : shift + count * 7])
    x, y = next(iter(task.train_dataloader()))
    assert x.shape == (3, 7) and x.dtype == torch.int64 and y.dtype == torch.int64


def test_lines_layout_as_the_ornn_code(tmp_path):
    lines = ["abcdef  ", "ab", "abcdefghi"]  # trailing spaces are stripped; "ab" is too short for shift 1 (< 3 chars)
    task = CharText(
        path=str(write_text_set(tmp_path, "\n".join(lines) + "\n", "abc\n", "abcd\n")), layout="lines", shift=1
    )
    inputs, targets, mask = task.make_split("train")
    assert mask.sum(dim=1).tolist() == [5, 8]
    encode = task.vocabulary.encode
    assert torch.equal(inputs[0, :5], encode("abcde").long()) and torch.equal(targets[0, :5], encode("bcdef").long())
    assert torch.equal(inputs[1], encode("abcdefgh").long()) and torch.equal(targets[1], encode("bcdefghi").long())
    assert inputs[0, 5:].eq(0).all() and not mask[0, 5:].any()


def test_bits_per_character_objective():
    spec = TaskSpec(
        name="text", input_size=6, output_size=6, readout="every_step", loss="cross_entropy_bits", symbolic=True
    )
    objective = OBJECTIVES["cross_entropy_bits"](spec)
    torch.manual_seed(0)
    outputs, targets = torch.randn(2, 4, 6), torch.randint(0, 6, (2, 4))
    ce = F.cross_entropy(outputs.reshape(-1, 6), targets.reshape(-1)).item()
    # float32: a log-sum-exp over 6 symbols, a mean over <= 8 steps, the division by ln 2
    rel = roundoff(torch.float32, 6 + 8 + 1)
    assert objective.loss(outputs, targets).item() == pytest.approx(ce / math.log(2), rel=rel)
    mask = torch.tensor([[True, True, True, True], [True, False, False, False]])
    masked = F.cross_entropy(outputs[mask], targets[mask]).item() / math.log(2)
    assert objective.loss(outputs, targets, mask).item() == pytest.approx(masked, rel=rel)
    metrics = objective.metrics()
    objective.update(metrics, outputs[:1], targets[:1], mask[:1])  # 4 characters, then 1: pooled per character,
    objective.update(metrics, outputs[1:], targets[1:], mask[1:])  # not a mean of the two batches' means
    assert metrics["bpc"].compute().item() == pytest.approx(masked, rel=rel)
    expected_acc = (outputs[mask].argmax(-1) == targets[mask]).float().mean().item()
    assert metrics["acc"].compute().item() == pytest.approx(expected_acc, rel=roundoff(torch.float32, 5))


def test_baseline_is_unigram_bits(tmp_path):
    task = CharText(path=str(write_text_set(tmp_path, TRAIN, VALID, TEST)), seq_len=4)
    counts = torch.bincount(task.ids["train"].long(), minlength=len(task.vocabulary)).double() + 1
    p = counts / counts.sum()
    expected = -p[task.ids["val"].long()].log2().mean().item()
    assert task.spec.baseline == pytest.approx(expected) and task.spec.main_metric == "val/bpc"


def test_explicit_files(tmp_path):
    write_text_set(tmp_path, TRAIN, VALID, TEST, names=("a.txt", "b.txt", "c.txt"))
    task = CharText(
        train_file=str(tmp_path / "a.txt"),
        val_file=str(tmp_path / "b.txt"),
        test_file=str(tmp_path / "c.txt"),
        seq_len=4,
    )
    assert task.files["val"].name == "b.txt"


def test_text_files_given_one_by_one_relative_to_the_start_folder_are_recorded_absolute(tmp_path, monkeypatch):
    """data.train_file / val_file / test_file (relative to the folder a run starts in, not to data.path) are
    recorded absolute like data.path; data.layout, a word that ends in neither _file nor _dir, stays as given."""
    start = tmp_path / "start"
    start.mkdir()
    for name in ("tr.txt", "va.txt", "te.txt"):
        (start / name).write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    monkeypatch.chdir(start)
    main(
        [
            "fit",
            "--config",
            str(Path(__file__).resolve().parents[1] / "configs" / "demo" / "text_tiny_lstm.yaml"),
            "--data.train_file",
            "tr.txt",
            "--data.val_file",
            "va.txt",
            "--data.test_file",
            "te.txt",
            "--model.hidden_size",
            "8",
            "--trainer.max_steps",
            "1",
            "--trainer.limit_val_batches",
            "1",
            "--db",
            db,
            "--runs_dir",
            str(tmp_path / "runs"),
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.enable_model_summary",
            "false",
        ]
    )
    data = yaml.safe_load((Path(Store(db).get_run(1).run_dir) / "config.yaml").read_text())["data"]["init_args"]
    assert [data[f"{split}_file"] for split in ("train", "val", "test")] == [
        str(start / name) for name in ("tr.txt", "va.txt", "te.txt")
    ]
    assert data["layout"] == "windows" and data["path"] is None
