"""Speech frame prediction (scoRNN 5.4, scuRNN 5.4, SRNN's TIMIT table; the experiment of Wisdom et al. 2016).

Each utterance, resampled to 8 kHz, becomes log-magnitude STFT frames (256-sample periodic Hann window, hop 128,
129 bins; `datamodules/spectral.py` states the framing and the log exactly; no normalisation). At step t the
network reads frame t and predicts frame t + 1 (`target: next_frame`). `target: previous_frame` is expRNN's data
as its README builds it (and SRNN's table uses): input frame t + 1, target frame t.

Corpora (`datamodules/speech_corpora.py` says exactly which recordings go where):
- `fsdd` (default, runs anywhere): Free Spoken Digit Dataset recordings of one speaker joined into utterances of
  several seconds (STOI and PESQ need seconds, not single digits); `path` defaults to fsdd/recordings in the
  data root ($ORTHOLAB_DATA; `ortholab data fetch fsdd` or `download: true` puts it there).
- `timit`: TIMIT as distributed (NIST SPHERE 16 kHz), SA excluded: 3,696 train / 400 dev / 192 core test.

Minibatches are zero-padded to their longest utterance with a (B, T) mask of valid steps. Two MSE definitions:
- `mse: valid_frames` (default): squared error summed over valid frames and the 129 bins, divided by their count
  (expRNN's corrected loss); logged as `<stage>/mse_valid_frames`.
- `mse: with_padding`: Wisdom et al.'s and scuRNN's: every batch is padded to the split's longest utterance and
  the masked squared error is averaged over ALL padded entries (padding counts as zero error in the denominator),
  so it is smaller than the other; logged as `<stage>/mse_with_padding`. Both are logged whichever trains.

Features are computed once per split, kept in memory by the DataModule (a progress bar shows when this takes more
than 3 s) and, with `cache_dir` set, saved there as `speech-<corpus>-<split>-<hash>.pt`: the hash covers every
setting that shapes the features and each recording's path, size and modification time, so a changed file or
setting computes afresh. The val and test splits also keep each utterance's waveform for audio evaluation.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from tqdm.auto import tqdm

from ortholab.datamodules import catalog
from ortholab.datamodules.base import require_positive
from ortholab.datamodules.batching import Batch, GatheredTaskDataModule, RaggedSequences
from ortholab.datamodules.download import ensure
from ortholab.datamodules.recordings import RecordingReader
from ortholab.datamodules.spec import TaskSpec
from ortholab.datamodules.spectral import SpectralFrames
from ortholab.datamodules.speech_corpora import (
    FSDD_HOW_TO_OBTAIN,
    FSDD_SPLITS,
    TIMIT_HOW_TO_OBTAIN,
    TIMIT_NAMINGS,
    TIMIT_TRAIN_SETS,
    UtteranceSource,
    fsdd_splits,
    timit_splits,
)
from ortholab.datamodules.speech_split import SpeechSplit, cache_key
from ortholab.datamodules.torchaudio_check import torchaudio_transforms
from ortholab.errors import ConfigError, OrthoLabWarning, home_path

CORPORA = ("fsdd", "timit")
TARGETS = ("next_frame", "previous_frame")
MSE_DEFINITIONS = {
    "valid_frames": ("frame_mse", "mse_valid_frames"),
    "with_padding": ("frame_mse_padded", "mse_with_padding"),
}  # -> (objective, logged metric)
EVALUATION_SPLITS = ("val", "test")
FEATURE_BATCH = 64  # utterances whose STFTs are computed as one batch


def with_padding_step(inputs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, silence: torch.Tensor) -> Batch:
    """One more valid step per row: the row's last frame as input and `silence`, a zero frame's features, as target."""
    rows, ends = torch.arange(inputs.shape[0]), mask.sum(1)
    inputs, targets = (torch.nn.functional.pad(x, (0, 0, 0, 1)) for x in (inputs, targets))
    mask = torch.nn.functional.pad(mask, (0, 1))
    inputs[rows, ends] = targets[rows, ends - 1]
    targets[rows, ends] = silence.to(targets.dtype)
    mask[rows, ends] = True
    return inputs, targets, mask


class SpeechPrediction(GatheredTaskDataModule):
    """Predict the next log-magnitude STFT frame of speech (FSDD by default, or TIMIT); docs/tasks.md describes it.

    corpus: 'fsdd' or 'timit'; path: FSDD's recordings/ folder (default: fsdd/recordings in the data root,
    `ortholab data list`; download: true fetches it there first, SHA-256 checked) or TIMIT's folder (holding
    TRAIN/ and TEST/; licensed, never fetched). timit_naming: 'wisdom' (val = 400 dev, test = 192 core) or 'exprnn'
    (swapped); timit_train: 'no_sa' (3,696) or 'exprnn_3640'. fsdd_split: 'index' or 'speaker';
    recordings_per_utterance: FSDD recordings joined per utterance. framing / log_scale: see spectral.py.
    target: 'next_frame' or 'previous_frame' (expRNN); mse: 'valid_frames' or 'with_padding' (Wisdom et al.).
    predict_padding: the last frame also predicts the zero padding after it (its features: 10·log10(1e-5) = -50 dB
    with db_power), so an utterance of L frames trains L predictions, as Wisdom et al.'s script does; default false:
    only the L - 1 predictions of real frames. With target: next_frame.
    max_utterances: keep only the first N utterances of every split (quick runs). cache_dir: where computed
    features are saved (null: memory only); a relative path lies under the runs folder (--runs_dir, $ORTHOLAB_RUNS,
    else ./runs), as `place_cache` puts it. seed: FSDD's grouping and the training order.
    """

    no_baseline = "its audio scores compare with copying the previous frame"

    OPTION_CHOICES = {  # the values these options take (checked below; a refused key's did-you-mean reads them)
        "corpus": CORPORA,
        "target": TARGETS,
        "mse": tuple(MSE_DEFINITIONS),
        "timit_naming": TIMIT_NAMINGS,
        "timit_train": TIMIT_TRAIN_SETS,
        "fsdd_split": FSDD_SPLITS,
    }

    def __init__(
        self,
        corpus: str = "fsdd",
        path: str | None = None,
        download: bool = False,
        timit_naming: str = "wisdom",
        timit_train: str = "no_sa",
        fsdd_split: str = "index",
        fsdd_val_speakers: list[str] | None = None,
        fsdd_test_speakers: list[str] | None = None,
        recordings_per_utterance: int = 8,
        sample_rate: int = 8000,
        framing: str = "wisdom",
        log_scale: str = "db_power",
        target: str = "next_frame",
        mse: str = "valid_frames",
        predict_padding: bool = False,
        max_utterances: int | None = None,
        cache_dir: str | None = None,
        seed: int = 5544,
        batch_size: int = 28,
        eval_batch_size: int | None = None,
        shuffle: bool = True,
        num_workers: int = 0,
    ):
        super().__init__(batch_size, eval_batch_size, shuffle, num_workers)
        given = {
            "corpus": corpus,
            "target": target,
            "mse": mse,
            "timit_naming": timit_naming,
            "timit_train": timit_train,
            "fsdd_split": fsdd_split,
        }
        for key, value in given.items():
            if value not in (allowed := self.OPTION_CHOICES[key]):
                raise ConfigError(f"data.{key} = {value!r}; choose one of {list(allowed)}")
        if max_utterances is not None:
            require_positive(max_utterances, "max_utterances")
        if predict_padding and target != "next_frame":
            raise ConfigError(
                f"data.predict_padding = true needs data.target: next_frame (it is {target!r}): the padding follows "
                "the last frame"
            )
        self.predict_padding = bool(predict_padding)
        self.corpus, self.target, self.mse = corpus, target, mse
        self.from_data_root = path is None and corpus == "fsdd"  # TIMIT has no default: it is licensed
        if self.from_data_root:
            path = str(catalog.FSDD.path() / "recordings")
        self.path = home_path(path, "data.path") if path is not None else None
        self.download = download
        self.timit_naming, self.timit_train = timit_naming, timit_train
        self.fsdd_split = fsdd_split
        self.fsdd_val_speakers = list(fsdd_val_speakers or ["nicolas"])
        self.fsdd_test_speakers = list(fsdd_test_speakers or ["theo"])
        self.recordings_per_utterance = require_positive(recordings_per_utterance, "recordings_per_utterance")
        self.reader = RecordingReader(sample_rate, FSDD_HOW_TO_OBTAIN if corpus == "fsdd" else TIMIT_HOW_TO_OBTAIN)
        self.frames = SpectralFrames(framing=framing, log_scale=log_scale)
        self.max_utterances = max_utterances
        self.cache_dir = home_path(cache_dir, "data.cache_dir") if cache_dir else None
        self.seed = seed
        self._sources: dict[str, list[UtteranceSource]] | None = None
        self._speech: dict[str, SpeechSplit] = {}
        objective, metric = MSE_DEFINITIONS[mse]
        source = corpus.upper() if self.path is not None else f"{corpus.upper()} (set data.path)"
        self.spec = TaskSpec(
            name="speech",
            input_size=self.frames.bins,
            output_size=self.frames.bins,
            readout="every_step",
            loss=objective,
            main_metric=f"val/{metric}",
            main_metric_mode="min",
            baseline=None,
            description=f"{source} speech: predict the {target.replace('_', ' ')}'s {self.frames.bins} log-magnitudes "
            f"({log_scale}); MSE over {mse.replace('_', ' ')}",
        )

    @property
    def sample_rate(self) -> int:
        return self.reader.sample_rate

    # which recordings -----------------------------------------------------------------------------------
    def place_cache(self, runs_dir: str | Path) -> None:
        """A relative cache_dir under `runs_dir` (the CLI's runs folder), so that the cache is found from any folder."""
        if self.cache_dir is not None and not self.cache_dir.is_absolute():
            self.cache_dir = home_path(runs_dir, "--runs_dir").absolute() / self.cache_dir

    def check_data(self) -> None:
        torchaudio_transforms()  # a torchaudio that cannot work here is said before a corpus is downloaded
        self.sources()  # a missing or malformed corpus fails here, before the run is recorded

    def setup(self, stage: str) -> None:
        self.check_data()

    def sources(self) -> dict[str, list[UtteranceSource]]:
        """{split: utterances} of the corpus, cut to `max_utterances` (listed once, no audio read)."""
        if self._sources is None:
            if self.path is None:
                raise ConfigError(f"data.path is not set: give TIMIT's folder; {TIMIT_HOW_TO_OBTAIN}")
            if self.from_data_root:
                ensure("fsdd", self.download)  # fetched when asked, else an error saying how to get it
            if self.corpus == "timit":
                splits, expected = timit_splits(self.path, self.timit_naming, self.timit_train)
                found = {split: len(utterances) for split, utterances in splits.items()}
                if found != expected:
                    rank_zero_warn(
                        f"TIMIT at {self.path}: {found} utterances per split, where the complete corpus "
                        f"gives {expected}; is the copy complete?",
                        category=OrthoLabWarning,
                    )
            else:
                splits = fsdd_splits(
                    self.path,
                    self.fsdd_split,
                    tuple(self.fsdd_val_speakers),
                    tuple(self.fsdd_test_speakers),
                    self.recordings_per_utterance,
                    self.seed,
                )
            self._sources = {split: utterances[: self.max_utterances] for split, utterances in splits.items()}
        return self._sources

    # features ------------------------------------------------------------------------------------------
    def _settings(self, split: str) -> dict:
        return {
            "corpus": self.corpus,
            "split": split,
            "frames": self.frames.__dict__,
            "rate": self.sample_rate,
            "names": [u.name for u in self.sources()[split]],
            "keep_audio": split in EVALUATION_SPLITS,
        }

    def speech(self, split: str) -> SpeechSplit:
        """The split's features (and, for val/test, waveforms): computed once, from the cache file when present."""
        if split not in self._speech:
            utterances = self.sources()[split]
            cache = None
            if self.cache_dir is not None:
                key = cache_key(self._settings(split), (f for u in utterances for f in u.files))
                cache = self.cache_dir / f"speech-{self.corpus}-{split}-{key}.pt"
            loaded = SpeechSplit.load(cache) if cache is not None else None
            self._speech[split] = loaded or self._compute(split, utterances)
            if cache is not None and loaded is None:
                self._speech[split].save(cache)
        return self._speech[split]

    def _compute(self, split: str, utterances: list[UtteranceSource]) -> SpeechSplit:
        waveforms, features = [], []
        with tqdm(
            total=len(utterances), desc=f"speech features ({self.corpus} {split})", unit="utt", delay=3, disable=None
        ) as progress:
            for first in range(0, len(utterances), FEATURE_BATCH):
                chunk = [self.reader.join(u.files) for u in utterances[first : first + FEATURE_BATCH]]
                waveforms += chunk
                features += [self.frames.features(frames) for frames in self.frames.stft_many(chunk)]
                progress.update(len(chunk))
        return SpeechSplit.build(
            [u.name for u in utterances],
            [[f.name for f in u.files] for u in utterances],
            features,
            waveforms,
            self.sample_rate,
            keep_audio=split in EVALUATION_SPLITS,
        )

    # batches ---------------------------------------------------------------------------------------------
    def make_dataset(self, split: str) -> RaggedSequences:
        speech = self.speech(split)
        steps = int(speech.lengths.max()) - 1 + self.predict_padding  # predicted steps of the longest utterance
        silence = self.frames.features(torch.zeros(self.frames.bins, dtype=torch.complex64))  # a zero frame's

        def finish(gathered: Batch) -> Batch:
            inputs, targets, mask = gathered
            if self.predict_padding:  # Wisdom et al.'s script: the last frame predicts the zero frame after it
                inputs, targets, mask = with_padding_step(inputs, targets, mask, silence)
            if self.target == "previous_frame":  # expRNN: read frame t + 1, output frame t
                inputs, targets = targets, inputs
            if self.mse == "with_padding":  # Wisdom et al. pad every batch to the split's longest utterance
                pad = steps - inputs.shape[1]
                inputs, targets = (torch.nn.functional.pad(x, (0, 0, 0, pad)) for x in (inputs, targets))
                mask = torch.nn.functional.pad(mask, (0, pad))
            return inputs, targets, mask

        return RaggedSequences(speech.features, speech.starts, speech.lengths, shift=1, finish=finish)

    def make_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The whole split as one padded batch (inputs, targets, mask)."""
        data = self.dataset(split)
        return data.batch(range(len(data)))
