"""Issue 23's messages: a TIMIT folder says which of TRAIN/ and TEST/ it lacks and where it looked, a damaged SPHERE
header is named by its field, and a single text file names the keys to use and can be cut with data.split."""

from pathlib import Path

import pytest
from standins import write_text_set
from test_speech import write_sphere

from ortholab.datamodules.recordings import RecordingReader
from ortholab.datamodules.speech_corpora import timit_root
from ortholab.datamodules.text import CharText
from ortholab.errors import ConfigError

TEXT = "".join(f"line {i} of the corpus\n" for i in range(40))


# TIMIT's layout ------------------------------------------------------------------------------------------------
def test_timit_without_test_names_the_missing_folder_and_where_it_looked(tmp_path):
    (tmp_path / "corpus" / "timit" / "train").mkdir(parents=True)
    with pytest.raises(ConfigError) as refused:
        timit_root(tmp_path / "corpus")
    message = str(refused.value)
    assert f"{tmp_path / 'corpus' / 'timit'} has TRAIN/ but no TEST/" in message and "\n" not in message


def test_timit_with_neither_folder_lists_where_it_looked(tmp_path):
    for name in ("audio", "docs"):
        (tmp_path / "corpus" / name).mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"neither is in .*corpus nor in its sub-folders audio, docs"):
        timit_root(tmp_path / "corpus")


# NIST SPHERE headers ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, bad, said",
    [
        (b"sample_rate -i 16000", b"sample_rate -i 0    ", "has `sample_rate -i 0`"),
        (b"sample_rate -i 16000", b"xample_rate -i 16000", "lacks the field sample_rate"),
        (b"channel_count -i 1", b"channel_count -i 0", "has `channel_count -i 0`"),
    ],
)
def test_a_damaged_sphere_header_is_named_by_file_and_field(tmp_path, field, bad, said):
    path = tmp_path / "SX6.WAV"
    write_sphere(path)
    data = path.read_bytes()
    assert field in data
    path.write_bytes(data.replace(field, bad))  # same length: the header keeps its 1024 bytes
    with pytest.raises(ConfigError) as refused:
        RecordingReader(16000, "how to obtain").read(path)
    message = str(refused.value)
    assert str(path) in message and "NIST SPHERE header" in message and said in message
    assert "SF_INFO" not in message and "internal error" not in message.lower()


# one text file ---------------------------------------------------------------------------------------------------
def test_a_single_text_file_names_the_keys_to_use(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT)
    with pytest.raises(ConfigError) as refused:
        CharText(path=str(path), seq_len=4)
    message = str(refused.value)
    for key in ("data.train_file", "data.val_file", "data.test_file", "data.split: [0.9, 0.05, 0.05]"):
        assert key in message
    assert repr(str(path)) in message and "\n" not in message


@pytest.mark.parametrize("layout", ["windows", "lines"])
def test_data_split_cuts_one_file_into_contiguous_chunks_in_order(tmp_path, layout):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT)
    task = CharText(path=str(path), split=[0.8, 0.1, 0.1], seq_len=4, layout=layout)
    texts = {split: task.vocabulary.decode(task.ids[split]) for split in ("train", "val", "test")}
    whole = TEXT if layout == "windows" else TEXT.replace("\n", "")  # 'lines' drops the line ends
    assert texts["train"] + texts["val"] + texts["test"] == whole  # in order, nothing lost or repeated
    unit = 1 if layout == "windows" else len("line 10 of the corpus")  # lines go whole to one split
    for split, fraction in (("train", 0.8), ("val", 0.1), ("test", 0.1)):
        assert abs(len(texts[split]) - fraction * len(whole)) <= unit
    assert task.spec.test_baseline is not None


@pytest.mark.parametrize(
    "split, message",
    [
        ([0.9, 0.1], "data.split = [0.9, 0.1]; give three positive fractions"),
        ([0.9, 0.2, 0.1], "sum to 1"),
        ([1.0, 0.0, 0.0], "three positive fractions"),
    ],
)
def test_bad_fractions_name_data_split(tmp_path, split, message):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        CharText(path=str(path), split=split, seq_len=4)


def test_data_split_with_a_folder_or_three_files_says_what_it_cuts(tmp_path):
    folder = write_text_set(tmp_path / "set", TEXT, TEXT, TEXT)
    with pytest.raises(ConfigError, match="is a folder; data.split cuts one text file"):
        CharText(path=str(folder), split=[0.8, 0.1, 0.1], seq_len=4)
    files = {
        f"{split}_file": str(Path(folder) / f"{name}.txt")
        for split, name in (("train", "train"), ("val", "valid"), ("test", "test"))
    }
    with pytest.raises(ConfigError, match="leave data.split out"):
        CharText(**files, split=[0.8, 0.1, 0.1], seq_len=4)
