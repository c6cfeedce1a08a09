"""Which code made a run or a report: the checkout's commit and the versions of the libraries that compute."""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]  # the repository root when running from a checkout
BUILT_FROM = CHECKOUT / "BUILT_FROM"  # in an installed wheel, ortholab/BUILT_FROM (setup.py); none in a checkout


def commit() -> str | None:
    """The checkout's short commit, with '+changes' when a tracked file differs from it; outside a checkout, the
    commit an installed wheel was built from (setup.py); None when neither is known."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != CHECKOUT:  # e.g. a venv inside another project
            return built_from()
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return built_from()
    return head + ("+changes" if dirty else "")


def built_from() -> str | None:
    """The commit the installed wheel was built from, where its build recorded one."""
    try:
        return BUILT_FROM.read_text().strip() or None
    except OSError:
        return None


def given_commit(value: str | None) -> str | None:
    """The commit a build without .git was told it comes from (ORTHOLAB_COMMIT: `docker build --build-arg`, a wheel
    from an sdist), None when not told; ValueError when the value is not a short or full commit id."""
    value = (value or "").strip()
    if value and not re.fullmatch(r"[0-9a-f]{7,40}(\+changes)?", value):
        raise ValueError(
            f"ORTHOLAB_COMMIT={value!r} is not a commit: give `git rev-parse --short HEAD`'s output or leave it unset"
        )
    return value or None


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's model as /proc/cpuinfo names it ('AMD EPYC 7B13'), else platform's guess ('x86_64')."""
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine() -> str:
    """'AMD EPYC, 2 cores, Linux x86_64': what a result was computed on, beside the host's name."""
    return f"{cpu_model()}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}"


def code_version() -> dict[str, str | None]:
    """What a run records as the code that trained it (run info 'code'): OrthoLab's version and commit, Python,
    torch and Lightning, and the machine it ran on (a resume elsewhere is another entry)."""
    return {
        "ortholab": _version("ortholab"),
        "commit": commit(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "lightning": _version("lightning"),
        "machine": machine(),
    }


RUN_ENVIRONMENT = ("ORTHOLAB_DATA", "ORTHOLAB_CONFIG_MODULES")  # what a run's data and own classes were read from


def environment() -> dict[str, str]:
    """The variables of RUN_ENVIRONMENT this process has (run info 'environment'), as set."""
    return {name: os.environ[name] for name in RUN_ENVIRONMENT if name in os.environ}


def environment_notes(run_id: int, recorded: object) -> list[str]:
    """One line for each variable the run was trained with that this shell sets otherwise or not at all: a command
    of the run's (`predict --run`, `fit --resume`) reads its data or finds its own family through them."""
    notes = []
    for name, value in (recorded if isinstance(recorded, dict) else {}).items():
        here = os.environ.get(name)
        if name in RUN_ENVIRONMENT and here != value:
            now = f"this shell has {name}={here}" if here is not None else "this shell does not set it"
            notes.append(
                f"note: run {run_id} was trained with {name}={value}, and {now} (`export "
                f"{name}={shlex.quote(str(value))}` reads as it did)"
            )
    return notes


def command_line(argv: list[str] | None = None) -> str:
    """This process's command as a user would type it ('ortholab fit --config X ...'), passwords in URLs masked."""
    import sys

    from ortholab.db.masking import mask_url

    argv = list(sys.argv if argv is None else argv)
    program = (
        "ortholab"
        if argv and (argv[0] in ("-c", "-m") or Path(argv[0]).name in ("ortholab", "__main__.py"))
        else Path(argv[0]).name
        if argv
        else "python"
    )
    return " ".join([program, *(shlex.quote(mask_url(arg)) for arg in argv[1:])])  # an argument that is a URL whole


UNRECORDED = {"ortholab": None, "commit": None}  # the first entry of a run trained by an OrthoLab that recorded no code


def describe(code: dict) -> str:
    """One line: the commit where there is one, else the version (e.g. 'c11ecd7' or 'ortholab 0.1.0')."""
    if code.get("commit") or code.get("ortholab"):
        return code.get("commit") or f"ortholab {code['ortholab']}"
    return "an OrthoLab that did not record its code"


def details(code: dict) -> str:
    """The commit (or version) with the library versions and the machine where recorded, for a run's details page."""
    where = f" on {code['machine']}" if code.get("machine") else ""
    if not code.get("torch"):
        return describe(code) + where
    return (
        f"{describe(code)} (torch {code.get('torch')}, Lightning {code.get('lightning')}, Python {code.get('python')})"
        + where
    )


OPTIMIZER_OPTIONS = "model.optimizers."  # a group's options as given: one left out takes the optimizer's default


def changed_settings(resume: dict) -> str:
    """The keys one resume changed, as 'key after (was before)', comma-separated; '' when it changed none. An
    optimizer option one side left to the optimizer's default (None there) is 'unset'."""

    def said(key: str, value) -> str:
        return "unset" if value is None and key.startswith(OPTIMIZER_OPTIONS) else repr(value)

    return ", ".join(
        f"{key} {said(key, after)} (was {said(key, before)})"
        for key, (before, after) in (resume.get("changed") or {}).items()
    )


HOW_IT_STOPPED = {  # a resumed run's status before the resume
    "failed": "failed",
    "interrupted": "was interrupted",
    "running": "was killed",  # left 'running' by a process that ended without a word
    "finished": "had finished",  # (its evaluation was left, or its max_steps raised)
}


def resume_notes(info: dict | None) -> list[str]:
    """One sentence per resume recorded in a run's info['resumes'] (db.SQLLogger), for its details page."""
    notes = []
    for resume in (info or {}).get("resumes", []):
        how = HOW_IT_STOPPED.get(resume.get("stopped"), "stopped")
        stopped = how + (f" ({resume['reason']})" if resume.get("reason") else "")
        settings = changed_settings(resume)
        notes.append(
            f"Continued from step {resume.get('step')} after it {stopped}"
            + (f", with {settings}" if settings else ", with the same settings")
            + (f": `{resume['command']}`" if resume.get("command") else "")
        )
    return notes


def restore_notes(info: dict | None) -> list[str]:
    """One sentence per move of the run's folder by `ortholab restore` into another runs folder (info['restores'],
    db/relocate.py): where the folder was before, where it trained until then."""
    return [
        f"Restored on {str(move.get('at', '?'))[:16].replace('T', ' ')} UTC from an export into {move.get('to')}; "
        f"its folder was {move.get('from')}"
        for move in (info or {}).get("restores", [])
    ]
