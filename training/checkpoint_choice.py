"""Which checkpoint file of a recorded run a `checkpoint` names, for every caller that takes one: `load_run(...,
checkpoint=)`, `ortholab evaluate-audio --checkpoint` and `ortholab predict|test|validate --run ID --checkpoint`.

'last' (checkpoints/last.ckpt of the run's folder), 'best' (the newest best-step<k>.ckpt it kept), a file name of
that folder (before a file of that name in the current folder: another run's, as often as not), or a path. What it
does not name is a ValueError in one line saying what the run holds; the command line gives it as its one line
(exit 2), naming its flag in place of the argument."""

from __future__ import annotations

import os
from pathlib import Path

RUN_CHECKPOINTS = ("last", "best")  # a run folder's checkpoints/last.ckpt, and the best-step<k>.ckpt it kept
ELSEWHERE = (  # why a run's recorded folder is not here, and what brings an export's checkpoints back
    "a store copied from another machine, or a moved $ORTHOLAB_RUNS; `ortholab restore DIR --runs-dir FOLDER` makes "
    "an export's runs and checkpoints this machine's"
)


def best_or_last(run_dir: str | os.PathLike | None) -> str:
    """'best' when the run kept a best-step checkpoint, else 'last' where it has last.ckpt: a fit that ended before
    its first validation kept only that (the command line's default)."""
    folder = Path(run_dir or "") / "checkpoints"
    if run_dir and not any(folder.glob("best-step*.ckpt")) and (folder / "last.ckpt").is_file():
        return "last"
    return "best"


def ckpt_files_in(folder: str | os.PathLike, most: int = 3) -> list[str]:
    """The .ckpt files of `folder` and of its checkpoints/ (a run folder's), as paths relative to it, the first `most`
    by name: not a deep search, the folder may be huge."""
    found = (p for pattern in ("*.ckpt", "checkpoints/*.ckpt") for p in Path(folder).glob(pattern))
    return sorted(str(p.relative_to(folder)) for p in found)[:most]


def _ages(folder: Path) -> list[tuple[float, Path]]:
    """The folder's .ckpt files with their times of writing; a file a training run deletes meanwhile (a best-step
    file a better one replaces) is left out, never a FileNotFoundError."""
    ages = []
    for path in folder.glob("*.ckpt"):
        try:
            ages.append((path.stat().st_mtime, path))
        except FileNotFoundError:
            continue
    return ages


def run_checkpoint(
    run_id: int,
    run_dir: str | os.PathLike | None,
    checkpoint: str | os.PathLike,
    flag: str | None = None,
    default: bool = False,
) -> Path:
    """The file `checkpoint` names for run `run_id`, whose folder is `run_dir` (the module docstring). Anything else
    is a ValueError naming `checkpoint=` (a library call) or `flag` (the command line's `--checkpoint`), said to be
    the default where `default` (the user typed none)."""
    given = os.fspath(checkpoint)
    named, a_path = (f"{flag} {given}", f"{flag} PATH") if flag else (f"checkpoint={given!r}", "checkpoint=PATH")
    named += " (the default)" if default else ""
    folder = Path(run_dir) / "checkpoints" if run_dir else None
    bare = Path(given).name == given  # a file name, which the run's folder is searched for first
    own = folder is not None and bare and (folder / given).is_file()
    if given not in RUN_CHECKPOINTS and not own and Path(given).is_file():
        return Path(given)
    missing = "" if bare else "no such file; "  # a path: it is not there either
    if given not in RUN_CHECKPOINTS and not own and Path(given).is_dir():  # a run folder, its checkpoints/, ...
        held = ckpt_files_in(given)
        missing = "a folder, not a checkpoint file, and it holds no .ckpt file; "  # what the run holds follows
        if held:
            example = f"{flag} {Path(given) / held[0]}" if flag else f"checkpoint={os.fspath(Path(given) / held[0])!r}"
            own_ones = f"{flag} last or best" if flag else "'last' or 'best'"
            raise ValueError(
                f"{named}: a folder, not a checkpoint file; it holds {', '.join(held)}: give one of them by its path "
                f"({example}), or {own_ones} for run {run_id}'s own"
            )
    if folder is None or not folder.parent.is_dir():
        where = f"folder {run_dir} is not on this machine ({ELSEWHERE})" if run_dir else "folder is not recorded"
        raise ValueError(f"{named}: {missing}run {run_id}'s {where}; give {a_path}, a copy of its .ckpt file")
    kept = [path for _, path in sorted(_ages(folder))]
    best = [p for p in kept if p.name.startswith("best-step")]
    chosen = {"last": folder / "last.ckpt", "best": best[-1] if best else None}.get(given, folder / given)
    if chosen is not None and chosen.is_file():
        return chosen
    if not kept:
        raise ValueError(
            f"{named}: {missing}run {run_id} kept no checkpoint ({folder} holds none): a predict, validate or test "
            f"run keeps none, nor does a fit stopped before its first; give a fit run that trained, or {a_path}"
        )
    names = ", ".join(sorted(p.name for p in kept))
    lacking = {"last": " and no last.ckpt", "best": " and no best-step file"}.get(given, "")
    there = {"last": (folder / "last.ckpt").is_file(), "best": bool(best)}
    words = [word for word in ("last", "best") if there[word] and word != given]  # those that would work: no echo
    offered = ", ".join(words if flag else map(repr, words))
    choices = f"{flag + ' ' if flag else ''}{offered}, " if words else ""
    raise ValueError(
        f"{named}: {missing}run {run_id} holds {names}{lacking}; give {choices}one of these names or a path"
    )
