"""The seeds of `reproduce --seeds`: the flag parsed and checked, and the seeds each row trains with."""

from __future__ import annotations

import yaml

from ortholab.db.published import PaperRow
from ortholab.errors import ConfigError
from ortholab.training.config_files import PACKAGE_ROOT as REPO_ROOT

MAX_SEED_COUNT = 20  # --seeds N: N runs per row; a larger number is taken for a seed given without its comma


def parse_seeds(text: str | None) -> int | list[int] | None:
    """--seeds: a count ('3': the config's seed and the next ones) or a comma-separated list ('1,2,3')."""
    if text is None:
        return None
    pieces = [p.strip() for p in str(text).split(",")]
    if "" in pieces[:-1]:  # '1,,2', ',2': a seed left out; once trained the others without a word (one seed: '7,')
        raise ConfigError(
            f"--seeds {text!r}: an empty entry between commas; give the seeds separated by single commas "
            f"(--seeds 1,2,3; one seed: --seeds 7,)"
        )
    parts = [p for p in pieces if p]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if values and "," not in str(text) and values[0] < 1:  # '0' read as a count: no run at all
        alone = "; to train with the seed 0 alone, give it as a list: --seeds 0," if values[0] == 0 else ""
        raise ConfigError(f"--seeds {text}: a count of runs per row is at least 1{alone}")
    if not values:
        raise ConfigError(
            f"--seeds {text!r}: give a count (--seeds 3: the config's seed and the next two) or "
            f"seeds separated by commas (--seeds 1,2,3; one seed: --seeds 7,)"
        )
    if "," not in str(text) and values[0] > MAX_SEED_COUNT:  # `--seeds 5546` meant as a seed trains 5546 runs
        raise ConfigError(
            f"--seeds {text}: a count of {values[0]} runs per row (at most {MAX_SEED_COUNT}); to train with the seed "
            f"{values[0]} alone, give it as a list: --seeds {values[0]},"
        )
    if "," not in str(text):
        return values[0]
    return _checked_seed_list(text, values)


MAX_SEED = 2**32 - 1  # seed_everything takes 0 .. 2^32 - 1 (numpy's range)


def _checked_seed_list(text: str, values: list[int]) -> list[int]:
    """--seeds 1,2,3: at most MAX_SEED_COUNT seeds, each in numpy's range, none twice."""
    wrong = next((v for v in values if not 0 <= v <= MAX_SEED), None)
    if wrong is not None:
        raise ConfigError(f"--seeds {text}: seed {wrong} is outside 0 .. {MAX_SEED} (the seeds a run can take)")
    if len(values) > MAX_SEED_COUNT:
        raise ConfigError(f"--seeds {text}: {len(values)} seeds, at most {MAX_SEED_COUNT} per command")
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise ConfigError(f"--seeds {text}: seed {twice[0]} is given twice; each seed trains one run per row")
    return values


def row_seeds(config: dict, seeds: int | list[int] | None) -> list[int]:
    """The seeds a row trains with: its config's seed (seed_everything, else 0) and the next ones, or those given."""
    first = config.get("seed_everything")
    first = int(first) if isinstance(first, int) and not isinstance(first, bool) else 0
    if isinstance(seeds, list):
        return seeds
    return [first + k for k in range(seeds or 1)]


def chosen_seeds(row: PaperRow, seeds: int | list[int] | None) -> list[int | None]:
    """The seeds `--seeds` gives this row (from its config's seed); [None] for a row without a config."""
    if not row.config:
        return [None]
    return row_seeds(yaml.safe_load((REPO_ROOT / row.config).read_text(encoding="utf-8")) or {}, seeds)


def seeds_flag(seeds: int | list[int] | None) -> str:
    """' --seeds 3', ' --seeds 4,5', ' --seeds 7,' as the command was given them; '' for none."""
    if seeds is None:
        return ""
    if isinstance(seeds, int):
        return f" --seeds {seeds}"
    return f" --seeds {','.join(map(str, seeds))}{',' if len(seeds) == 1 else ''}"
