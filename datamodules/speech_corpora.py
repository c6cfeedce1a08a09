"""Which recordings make up each split's utterances: TIMIT as distributed, or joined Free Spoken Digit recordings.

Within a split, utterances are ordered round-robin over speakers (each speaker's first, then each one's second,
...), so that the first N, which `max_utterances` and the audio evaluation take, span as many speakers as can be.

TIMIT (LDC93S1; Garofolo et al. 1993), read from the layout of the LDC distribution:
`TRAIN|TEST / DR1..DR8 / <speaker> / <SA|SI|SX><n>.WAV` (NIST SPHERE, 16 kHz, 16 bit; case-insensitive, the
folder given or one folder below it). The SA sentences (read by every speaker) are excluded everywhere.
- train: TRAIN without SA = 3,696 utterances (scoRNN, scuRNN, Wisdom et al.); `timit_train: exprnn_3640` drops,
  as Wisdom et al.'s script does with its substring test `'sa' in path.lower()`, also the 7 training speakers whose
  ID contains "SA" = 3,640 utterances (expRNN, SRNN).
- dev: the 50-speaker development set (400 utterances; Kaldi's/Wisdom et al.'s list) from TEST;
  core: the 24-speaker core test set (192 utterances) from TEST.
- `timit_naming: wisdom` (default): val = dev (400), test = core (192), as Wisdom et al., scoRNN and scuRNN
  (select on the 400, report the 192). `exprnn`: val = core (192), test = dev (400), expRNN's and SRNN's naming.

Free Spoken Digit Dataset (FSDD; Jakobovski et al., CC BY-SA 4.0): 3,000 recordings `{digit}_{speaker}_{index}.wav`
(8 kHz mono; 6 speakers x 10 digits x 50 indices) of 0.14-2.3 s each. Single digits are too short for STOI and
PESQ, so an utterance here is `recordings_per_utterance` recordings of ONE speaker joined end to end:
- split by index (default): recordings with index 0-4 form the test split (FSDD's own test set), 5-9 the
  validation split, 10-49 training; split by speaker: `fsdd_val_speakers` / `fsdd_test_speakers` hold out whole
  speakers (default nicolas / theo), the others train.
- within a split, each speaker's recordings are shuffled with numpy's default_rng(seed) (speakers in sorted order,
  one generator) and cut into ceil(n / k) groups of nearly equal size, at most k (numpy.array_split), so nothing
  is dropped; the same seed always gives the same utterances. Names: `<speaker>-<split>-<number>`. With FSDD's
  50 recordings per speaker and digit and k = 8: 300 / 42 / 42 utterances (train / val / test) of about 3.5 s.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ortholab.errors import ConfigError

TIMIT_HOW_TO_OBTAIN = (
    "TIMIT (LDC93S1) is licensed by the Linguistic Data Consortium, https://catalog.ldc.upenn.edu/"
    "LDC93S1; set data.path to the folder holding its TRAIN and TEST folders"
)
FSDD_HOW_TO_OBTAIN = (
    "the Free Spoken Digit Dataset is at https://github.com/Jakobovski/free-spoken-digit-dataset "
    "(CC BY-SA 4.0); set data.path to its recordings/ folder"
)

# Wisdom et al.'s lists (stwisdom/urnn timit_dev_spk.list = Kaldi egs/timit/s5/conf/dev_spk.list; timit_test_spk.list)
TIMIT_DEV_SPEAKERS = frozenset(
    [
        "FAKS0",
        "FDAC1",
        "FJEM0",
        "MGWT0",
        "MJAR0",
        "MMDB1",
        "MMDM2",
        "MPDF0",
        "FCMH0",
        "FKMS0",
        "MBDG0",
        "MBWM0",
        "MCSH0",
        "FADG0",
        "FDMS0",
        "FEDW0",
        "MGJF0",
        "MGLB0",
        "MRTK0",
        "MTAA0",
        "MTDT0",
        "MTHC0",
        "MWJG0",
        "FNMR0",
        "FREW0",
        "FSEM0",
        "MBNS0",
        "MMJR0",
        "MDLS0",
        "MDLF0",
        "MDVC0",
        "MERS0",
        "FMAH0",
        "FDRW0",
        "MRCS0",
        "MRJM4",
        "FCAL1",
        "MMWH0",
        "FJSJ0",
        "MAJC0",
        "MJSW0",
        "MREB0",
        "FGJD0",
        "FJMG0",
        "MROA0",
        "MTEB0",
        "MJFC0",
        "MRJR0",
        "FMML0",
        "MRWS1",
    ]
)
TIMIT_CORE_SPEAKERS = frozenset(
    [
        "MDAB0",
        "MWBT0",
        "FELC0",
        "MTAS1",
        "MWEW0",
        "FPAS0",
        "MJMP0",
        "MLNT0",
        "FPKT0",
        "MLLL0",
        "MTLS0",
        "FJLM0",
        "MBPM0",
        "MKLT0",
        "FNLP0",
        "MCMJ0",
        "MJDH0",
        "FMGD0",
        "MGRT0",
        "MNJM0",
        "FDHC0",
        "MJLN0",
        "MPAM0",
        "FMLD0",
    ]
)
TIMIT_EXPECTED = {"no_sa": 3696, "exprnn_3640": 3640, "dev": 400, "core": 192}
TIMIT_NAMINGS = ("wisdom", "exprnn")
TIMIT_TRAIN_SETS = ("no_sa", "exprnn_3640")
FSDD_SPLITS = ("index", "speaker")
TIMIT_SENTENCE = re.compile(r"^(SA|SI|SX)\d+\.WAV$", re.IGNORECASE)
TIMIT_REGION = re.compile(r"^DR\d$", re.IGNORECASE)
FSDD_NAME = re.compile(r"^(\d)_([A-Za-z]+)_(\d+)\.wav$", re.IGNORECASE)
FSDD_INDEX_SPLITS = {"test": range(5), "val": range(5, 10), "train": range(10, 50)}


@dataclass(frozen=True)
class UtteranceSource:
    """One utterance of a split: its name and the recordings joined, in order, to make it."""

    name: str
    files: tuple[Path, ...]


def round_robin(utterances: list[UtteranceSource], speaker_of) -> list[UtteranceSource]:
    """The utterances ordered so that every speaker's k-th comes before anyone's (k+1)-th (speakers in the order
    they first appear): the first N of a split, which `max_utterances` and the audio evaluation take, then cover
    as many speakers as possible."""
    rank: dict[str, int] = {}
    keyed = []
    for position, utterance in enumerate(utterances):
        speaker = speaker_of(utterance)
        rank[speaker] = rank.get(speaker, -1) + 1
        keyed.append((rank[speaker], position, utterance))
    return [utterance for _, _, utterance in sorted(keyed, key=lambda k: k[:2])]


# TIMIT ---------------------------------------------------------------------------------------------------
def _child(folder: Path, name: str) -> Path | None:
    """`folder`'s sub-folder called `name`, in any letter case."""
    return next((p for p in sorted(folder.iterdir()) if p.is_dir() and p.name.upper() == name), None)


def timit_root(path: Path) -> tuple[Path, Path]:
    """TIMIT's TRAIN and TEST folders under `path` (or under the one folder below it that holds them)."""
    if not path.is_dir():
        raise ConfigError(f"data.path = {str(path)!r} is not a folder; {TIMIT_HOW_TO_OBTAIN}")
    subfolders = sorted(p for p in path.iterdir() if p.is_dir())
    for folder in [path, *subfolders]:
        train, test = _child(folder, "TRAIN"), _child(folder, "TEST")
        if train and test:
            return train, test
    raise ConfigError(
        f"data.path = {str(path)!r} is not TIMIT's layout: expected TRAIN/ and TEST/ folders (in it or "
        f"one level below) holding DR1..DR8/<speaker>/<SA|SI|SX><n>.WAV, but "
        f"{_timit_parts_missing(path, subfolders)}; {TIMIT_HOW_TO_OBTAIN}"
    )


def _timit_parts_missing(path: Path, subfolders: list[Path]) -> str:
    """Which of TRAIN/ and TEST/ is missing, and where it was looked for."""
    for folder in [path, *subfolders]:
        found = [name for name in ("TRAIN", "TEST") if _child(folder, name)]
        if found:
            missing = "TEST" if found == ["TRAIN"] else "TRAIN"
            return f"{folder} has {found[0]}/ but no {missing}/"
    if not subfolders:
        return f"neither is in {path}, which has no sub-folders"
    shown = ", ".join(p.name for p in subfolders[:8]) + (
        f" and {len(subfolders) - 8} more" if len(subfolders) > 8 else ""
    )
    return f"neither is in {path} nor in its sub-folders {shown}"


def _timit_sentences(part: Path) -> list[tuple[str, str, Path]]:
    """(speaker, sentence id, file) of every SI/SX/SA recording under a TRAIN or TEST folder, sorted."""
    found = []
    for region in sorted(p for p in part.iterdir() if p.is_dir() and TIMIT_REGION.match(p.name)):
        for speaker in sorted(p for p in region.iterdir() if p.is_dir()):
            for file in sorted(speaker.iterdir()):
                if file.is_file() and TIMIT_SENTENCE.match(file.name):
                    found.append((speaker.name.upper(), file.name.split(".")[0].upper(), file))
    if not found:
        raise ConfigError(
            f"{part} holds no DR*/<speaker>/<SA|SI|SX><n>.WAV recordings: not TIMIT's layout; {TIMIT_HOW_TO_OBTAIN}"
        )
    return found


def timit_splits(path: Path, naming: str = "wisdom", train_set: str = "no_sa") -> tuple[dict, dict]:
    """{split: [UtteranceSource]} for train/val/test, and {split: expected count} for a complete TIMIT."""
    if naming not in TIMIT_NAMINGS:
        raise ConfigError(
            f"data.timit_naming = {naming!r}; choose 'wisdom' (val = 400 dev, test = 192 core) or "
            f"'exprnn' (val = 192 core, test = 400 dev)"
        )
    if train_set not in TIMIT_TRAIN_SETS:
        raise ConfigError(f"data.timit_train = {train_set!r}; choose 'no_sa' (3,696 utterances) or 'exprnn_3640'")
    train_dir, test_dir = timit_root(path)

    def source(speaker: str, sentence: str, file: Path) -> UtteranceSource:
        return UtteranceSource(f"{speaker}_{sentence}", (file,))  # speaker IDs are unique across TRAIN and TEST

    train = [
        source(spk, sent, f)
        for spk, sent, f in _timit_sentences(train_dir)
        if not sent.startswith("SA") and (train_set == "no_sa" or "SA" not in spk)
    ]
    test_pool = [(spk, sent, f) for spk, sent, f in _timit_sentences(test_dir) if not sent.startswith("SA")]
    dev = [source(spk, sent, f) for spk, sent, f in test_pool if spk in TIMIT_DEV_SPEAKERS]
    core = [source(spk, sent, f) for spk, sent, f in test_pool if spk in TIMIT_CORE_SPEAKERS]
    val, test = (dev, core) if naming == "wisdom" else (core, dev)
    expected_val, expected_test = ("dev", "core") if naming == "wisdom" else ("core", "dev")
    splits = {
        split: round_robin(u, lambda x: x.name.split("_")[0])
        for split, u in (("train", train), ("val", val), ("test", test))
    }
    for split, utterances in splits.items():
        if not utterances:
            listed = "development" if (split == "val") == (naming == "wisdom") else "core test"
            raise ConfigError(
                f"{path}: the {split} split is empty (none of the {listed} set's speakers found under "
                f"{test_dir if split != 'train' else train_dir}); {TIMIT_HOW_TO_OBTAIN}"
            )
    expected = {
        "train": TIMIT_EXPECTED[train_set],
        "val": TIMIT_EXPECTED[expected_val],
        "test": TIMIT_EXPECTED[expected_test],
    }
    return splits, expected


# FSDD ----------------------------------------------------------------------------------------------------
def fsdd_recordings(path: Path) -> dict[str, list[tuple[int, int, Path]]]:
    """{speaker: [(digit, index, file)]} of an FSDD recordings folder, sorted."""
    if not path.is_dir():
        raise ConfigError(f"data.path = {str(path)!r} is not a folder; {FSDD_HOW_TO_OBTAIN}")
    speakers = defaultdict(list)
    for file in sorted(path.iterdir()):
        match = FSDD_NAME.match(file.name)
        if match and file.is_file():
            speakers[match.group(2).lower()].append((int(match.group(1)), int(match.group(3)), file))
    if not speakers:
        raise ConfigError(f"{path} holds no FSDD recordings named <digit>_<speaker>_<index>.wav; {FSDD_HOW_TO_OBTAIN}")
    return {speaker: sorted(files) for speaker, files in sorted(speakers.items())}


def fsdd_splits(
    path: Path,
    split_by: str = "index",
    val_speakers: tuple[str, ...] = ("nicolas",),
    test_speakers: tuple[str, ...] = ("theo",),
    per_utterance: int = 8,
    seed: int = 5544,
) -> dict[str, list[UtteranceSource]]:
    """{split: [UtteranceSource]}: each speaker's recordings of the split, shuffled and joined in groups."""
    recordings = fsdd_recordings(path)
    if split_by not in FSDD_SPLITS:
        raise ConfigError(
            f"data.fsdd_split = {split_by!r}; choose 'index' (FSDD's indices 0-4 test, 5-9 val) or "
            f"'speaker' (data.fsdd_val_speakers / data.fsdd_test_speakers held out)"
        )
    held_out = {"val": {s.lower() for s in val_speakers}, "test": {s.lower() for s in test_speakers}}
    if split_by == "speaker":
        unknown = sorted((held_out["val"] | held_out["test"]) - set(recordings))
        if unknown or held_out["val"] & held_out["test"] or not held_out["val"] or not held_out["test"]:
            raise ConfigError(
                f"data.fsdd_val_speakers {sorted(held_out['val'])} and data.fsdd_test_speakers "
                f"{sorted(held_out['test'])} must be non-empty, disjoint and among the speakers of "
                f"{path}: {sorted(recordings)}"
            )
    rng = np.random.default_rng(seed)
    splits: dict[str, list[UtteranceSource]] = {"train": [], "val": [], "test": []}
    for split in splits:
        for speaker, files in recordings.items():
            if split_by == "index":
                chosen = [f for digit, index, f in files if index in FSDD_INDEX_SPLITS[split]]
            else:
                home = next((s for s in ("val", "test") if speaker in held_out[s]), "train")
                chosen = [f for _, _, f in files] if home == split else []
            if not chosen:
                continue
            order = rng.permutation(len(chosen))
            groups = np.array_split(order, math.ceil(len(chosen) / per_utterance))
            splits[split] += [
                UtteranceSource(f"{speaker}-{split}-{number:03d}", tuple(chosen[i] for i in group))
                for number, group in enumerate(groups)
            ]
    splits = {split: round_robin(utterances, lambda u: u.name.split("-")[0]) for split, utterances in splits.items()}
    for split, utterances in splits.items():
        if not utterances:
            raise ConfigError(
                f"{path}: no recordings fall into the {split} split (data.fsdd_split = {split_by!r}); "
                f"{FSDD_HOW_TO_OBTAIN}"
            )
    return splits
