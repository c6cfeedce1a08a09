"""What each `ortholab bench --suite` takes: its settings and their defaults, its `--quick` form, and which of the
command's flags set them (the rest are `--param KEY=VALUE`). Torch-free, so building the CLI's help stays cheap.

Every suite prints ratios of medians: the models or settings it compares run alternately within each repetition,
so a noisy machine slows them alike and the ratio holds where the milliseconds do not.
"""

from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass

from ortholab.errors import ConfigError

# the command's flags a suite may take, and the setting each sets (a suite takes one value where the flag
# takes a list)
FLAG_FIELDS = {
    "families": "family",
    "sizes": "size",
    "batches": "batch",
    "seq_len": "seq_len",
    "repeats": "repeats",
    "device": "device",
}


@dataclass
class ScurnnComplex:
    """scuRNN's recurrence in its [Re | Im] real layout (models/complex_recurrence.py) against the same
    algorithm in torch's complex dtypes, the design alternative: forward+backward of the layer."""

    hidden: int = 116  # the scuRNN paper's n at 16k parameters (pixel MNIST)
    batch: int = 128
    seq_len: int = 784
    repeats: int = 7
    device: str = "cpu"


@dataclass
class OrnnSrnn:
    """the oRNN (m = n reflections) and the SRNN with the paper's pMNIST f_r (3 layers x 32) sized to a budget, against
    nn.RNN(relu) at the same n and nn.LSTM at the same budget (the main table runs SRNN at its defaults)."""

    size: str = "16k"
    batch: int = 128
    seq_len: int = 784
    repeats: int = 7
    device: str = "cpu"
    srnn_hyper: int = 32
    srnn_layers: int = 3


@dataclass
class OrnnVariants:
    """the oRNN's W formed by the compact WY representation against one reflection at a time (forward+backward),
    and, where m < n, applied per step as a dense W against its WY factors."""

    shapes: str = "128x16,170x170,512x512"  # n x m (hidden size x reflections), comma-separated
    batch: int = 128
    seq_len: int = 784
    repeats: int = 7
    device: str = "cpu"


@dataclass
class Callbacks:
    """training with the analysis callbacks at an interval against the same training without them, both
    recorded in a SQLite store (adding task, CPU); the target is a ratio under 1.05 at interval 100."""

    family: str = "scornn"
    hidden: int = 170
    batch: int = 50
    seq_len: int = 200
    steps: int = 400
    interval: int = 100
    repeats: int = 3
    callbacks: str = "drift,eigenvalues,gradients,trajectory,timing,nan_guard"


@dataclass
class RunsListing:
    """`ortholab runs` on a large store (1 % of the runs still running): the listing against the 1 s target,
    against its summary query alone and against a whole `ortholab runs` process."""

    runs: int = 1000
    points: int = 10_000  # metric points per run
    keys: int = 10  # metrics per run, at most 10
    db: str = ""  # SQLite file to build, or to reuse where it exists ('': a temporary one)
    process: int = 1  # 1: also time a whole `ortholab runs` process (interpreter start-up included); 0: not
    repeats: int = 5


@dataclass
class MusicEval:
    """a validation pass over a music split in batches of the file's order, in batches of similar length (the
    default) and one piece at a time; the data set's file from the data root unless path or synthetic is given."""

    family: str = "rtransformer"
    hidden: int = 160  # the R-Transformer music script's d_model
    batch: int = 64
    repeats: int = 3
    device: str = "cpu"
    dataset: str = "nottingham"
    path: str = ""  # the .mat/.pickle file or its folder ('': the data set's file in the data root)
    synthetic: int = 0  # > 0: that many random pieces of 3 to 40 steps per split instead of a file


@dataclass
class LruModes:
    """the LRU unit's FFT convolution against its scan of the states (forward+backward, no state in or out) at
    several widths H, and which one its `mode: auto` takes at each; the unit in auto's mode against scoRNN's
    pixel-MNIST model at reference_hidden (0: none)."""

    widths: str = "27,45,60,95"  # H, comma-separated: the 16k and 69k budgets' 27 and 95, and the crossover
    state_size: int = 128  # N, the LRU's default
    reference_hidden: int = 170  # scoRNN's n at the 16k budget (its Table 1)
    batch: int = 50
    seq_len: int = 784
    repeats: int = 3
    device: str = "cpu"


@dataclass
class NumbaPool:
    """a uRNN's forward+backward (numba kernels) with OMP_NUM_THREADS=1, its process's numba pool of one thread or
    of `pool`, beside another 1-thread process running an EURNN (numba too) with either pool: the pool's idle
    threads spin on the cores the other process uses (ortholab/threads.py)."""

    hidden: int = 470  # scoRNN Figure 1's uRNN n
    neighbour_hidden: int = 512  # its EURNN n
    batch: int = 20
    seq_len: int = 1020  # copying T = 1000
    pool: int = 0  # the larger pool's threads (0: one per core, numba's default)
    repeats: int = 3


SUITES = {
    "scurnn-complex": ScurnnComplex,
    "ornn-srnn": OrnnSrnn,
    "ornn-variants": OrnnVariants,
    "callbacks": Callbacks,
    "runs-listing": RunsListing,
    "music-eval": MusicEval,
    "lru-modes": LruModes,
    "numba-pool": NumbaPool,
}
QUICK = {  # the quickest form of each suite, as `--quick` and the tests run it
    "scurnn-complex": {"hidden": 8, "batch": 4, "seq_len": 16, "repeats": 1},
    "ornn-srnn": {"batch": 4, "seq_len": 16, "repeats": 1},
    "ornn-variants": {"shapes": "16x4,16x16", "batch": 4, "seq_len": 16, "repeats": 1},
    "callbacks": {"hidden": 8, "batch": 5, "seq_len": 10, "steps": 4, "interval": 2, "repeats": 1},
    "runs-listing": {"runs": 4, "points": 40, "keys": 2, "process": 0, "repeats": 1},
    "music-eval": {"family": "lstm", "hidden": 8, "batch": 4, "synthetic": 12, "repeats": 1},
    "lru-modes": {"widths": "4,40", "state_size": 8, "reference_hidden": 8, "batch": 3, "seq_len": 16, "repeats": 1},
    "numba-pool": {"hidden": 8, "neighbour_hidden": 8, "batch": 2, "seq_len": 16, "repeats": 1},
}


def _flag(field: str) -> str:
    names = {value: key for key, value in FLAG_FIELDS.items()}
    return "--" + names[field].replace("_", "-") if field in names else f"--param {field}="


def takes(suite: str) -> str:
    """The flags and params a suite takes, for its help and its errors."""
    fields = [f.name for f in dataclasses.fields(SUITES[suite])]
    flags = [_flag(f) for f in fields if f in FLAG_FIELDS.values()]
    params = [f"{f}={getattr(SUITES[suite](), f)}" for f in fields if f not in FLAG_FIELDS.values()]
    return ", ".join(flags) + (f"; --param {', '.join(params)}" if params else "")


def _convert(option: str, text: str, kind: str, suite: str):
    if "," in text and not option.startswith("--param"):
        raise ConfigError(f"{option} {text}: --suite {suite} takes one value here")
    if kind == "int":
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0 and not (option == "--param process=" and text == "0"):
            raise ConfigError(
                f"{option}{'' if option.endswith('=') else ' '}{text}: --suite {suite} takes one positive integer here"
            )
        return value
    return text


def resolve(suite: str, flags: dict, params: list[str] | None, quick: bool):
    """The suite's settings: its defaults, then its quick form (with `quick`), then the flags given (not None),
    then `--param KEY=VALUE` pairs. A flag or key the suite does not take is one line naming what it takes."""
    cls = SUITES[suite]
    kinds = {f.name: f.type for f in dataclasses.fields(cls)}
    values = dataclasses.asdict(cls())
    if quick:
        values.update(QUICK[suite])
    for flag, given in flags.items():
        if given is None:
            continue
        option, field = "--" + flag.replace("_", "-"), FLAG_FIELDS[flag]
        if field not in kinds:
            raise ConfigError(f"{option} does not apply to --suite {suite}; it takes {takes(suite)}")
        values[field] = _convert(option, str(given), kinds[field], suite)
    for pair in params or []:
        key, equals, text = pair.partition("=")
        if not equals or key not in kinds or key in FLAG_FIELDS.values():
            raise ConfigError(f"--param {pair!r}: --suite {suite} takes {takes(suite)}")
        values[key] = _convert(f"--param {key}=", text, kinds[key], suite)
    given = {pair.partition("=")[0] for pair in params or []}
    if "path" in given:
        _check_data_path(values["path"], suite)
        if "synthetic" in given and values.get("synthetic"):
            raise ConfigError(
                f"--param path={values['path']} and --param synthetic={values['synthetic']}: --suite "
                f"{suite} reads one of them; drop one"
            )
        if "synthetic" in values:
            values["synthetic"] = 0  # a file given is measured, whatever --quick's stand-in would be
    return cls(**values)


def _check_data_path(path: str, suite: str) -> None:
    """A data file or folder given to a suite exists (else it would silently measure something else)."""
    from pathlib import Path

    if path and not Path(path).expanduser().exists():
        raise ConfigError(
            f"--param path={path}: no such file or folder; give the data set's .mat/.pickle file or its "
            f"folder, or leave path out for the data set's file in the data root (--suite {suite})"
        )


def help_text() -> str:
    """The suites as `ortholab bench --help` lists them."""

    def wrap(text: str, indent: str) -> str:
        return textwrap.fill(text, 88, initial_indent=indent, subsequent_indent="      ")

    lines = [
        "suites (--suite NAME; each prints ratios of medians, what it compares alternating in one process):",
        wrap(
            "families (default): every family against nn.RNN(relu) at the same n and nn.LSTM at the same "
            "budget, at the papers' pixel-MNIST settings (the flags above)",
            "  ",
        ),
    ]
    for name, cls in SUITES.items():
        lines += [wrap(f"{name}: {' '.join(cls.__doc__.split())}", "  "), wrap(f"takes {takes(name)}", "      ")]
    return "\n".join(lines)
