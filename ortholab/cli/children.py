"""The processes a command trains through (`reproduce`'s fits and tests, `sweep`'s trials and workers): Ctrl-C or
SIGTERM stop them the way a fit run alone stops, at a batch boundary with a checkpoint, and the command waits for
that, then starts nothing more.

Without this, Python's subprocess killed the child with SIGKILL a quarter of a second after a Ctrl-C (before it
could save its step), and a SIGTERM to the parent alone ended the parent and left its child training, orphaned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from contextlib import contextmanager

ORTHOLAB = [sys.executable, "-c", "from ortholab.cli.main import main; main()"]  # `ortholab` as a child process

_live: set[subprocess.Popen] = set()
_stopped_by: signal.Signals | None = None
PARENT_ENV = "ORTHOLAB_STOP_WITH_PARENT"  # a child's parent PID: the child gets SIGTERM when that parent dies
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_with_parent() -> None:
    """In a child started with PARENT_ENV (a sweep's trial): SIGTERM when its parent dies, by SIGKILL too (Linux's
    PR_SET_PDEATHSIG), so that it stops at a batch boundary with a checkpoint (run `interrupted`). Without this, a
    trial whose `sweep` was killed with -9 trained on, orphaned, and no worker ever counted its result."""
    parent = os.environ.pop(PARENT_ENV, None)  # not passed on to the child's own children
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the child outlives a killed parent, as before
        return
    if os.getppid() != int(parent):  # the parent died before the line above: the signal will not come
        os.kill(os.getpid(), signal.SIGTERM)


def stopped_by() -> signal.Signals | None:
    """The signal that asked this command to stop (None: none did)."""
    return _stopped_by


def start(argv: list[str], env: dict, **popen) -> subprocess.Popen | None:
    """argv as a child process that a stop reaches (see `wait`); None when a stop was asked before it started."""
    if _stopped_by is not None:
        return None
    child = subprocess.Popen(argv, env=env, **popen)
    _live.add(child)
    if _stopped_by == signal.SIGTERM:  # the signal came between the check above and the line before
        child.send_signal(signal.SIGTERM)
    return child


def wait(child: subprocess.Popen) -> int:
    """The child's exit code, waited for even through Ctrl-C; a stop no longer reaches it after."""
    try:
        return child.wait()
    finally:
        _live.discard(child)


def run(argv: list[str], env: dict) -> int | None:
    """argv as a child process, waited for even through Ctrl-C: its exit code, or None when a stop was asked
    before it started."""
    child = start(argv, env)
    return None if child is None else wait(child)


def stop_name() -> str:
    """The stop in a user's words: "Ctrl-C" or "SIGTERM"."""
    return "Ctrl-C" if _stopped_by == signal.SIGINT else "SIGTERM"


def _stop(signum: int, frame) -> None:
    global _stopped_by
    _stopped_by = _stopped_by or signal.Signals(signum)
    if signum == signal.SIGTERM:  # sent to this process alone (`kill PID`): each child stops as a fit run alone does
        for child in list(_live):
            child.send_signal(signal.SIGTERM)
    # Ctrl-C in a terminal reaches every process of the group: the children have it already (a second would
    # stop them at once, without their checkpoint)


@contextmanager
def stopping_gracefully():
    """Within: SIGTERM and Ctrl-C are recorded (`stopped_by`) and passed on as above instead of ending this
    process; the previous handlers come back after."""
    global _stopped_by
    _stopped_by = None
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def read_fit_args(argv: list[str], env: dict | None = None) -> tuple[str | None, dict | None]:
    """What `ortholab fit ARGV --print_config` refuses (the reason of its `ortholab: error:` line), read in a child
    before anything trains, or None; and the config it printed, or None. A typo in a flag or a sweep space is then one
    line, not one failed fit per row or trial."""
    import yaml

    done = subprocess.run([*ORTHOLAB, "fit", *argv, "--print_config"], capture_output=True, text=True, env=env)
    if not done.returncode:
        try:
            printed = yaml.safe_load(done.stdout)
        except yaml.YAMLError:  # not a config: nothing more to check here; the run itself reads it
            return None, None
        return _refused_model_options(printed, argv), printed if isinstance(printed, dict) else None
    said = [line for line in done.stderr.splitlines() if line.startswith("ortholab: error: ")]
    return (said[-1].removeprefix("ortholab: error: ") if said else " ".join(done.stderr.split())[-300:]), None


def validates_nothing(printed: dict | None, so: str) -> str | None:
    """Why a fit of this printed config would record no validation (`so`: what that costs the caller), where its
    trainer keys alone tell (validation every K steps, K past max_steps; validation turned off); None otherwise
    (validation counted in epochs depends on the data: the fit itself says)."""
    trainer = (printed or {}).get("trainer")
    if not isinstance(trainer, dict):
        return None
    if trainer.get("limit_val_batches") in (0, 0.0):
        return f"trainer.limit_val_batches = 0 turns validation off, so {so}"
    steps, every = trainer.get("max_steps"), trainer.get("val_check_interval")
    counts = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (steps, every))
    if counts and trainer.get("check_val_every_n_epoch") is None and steps < every:
        return (
            f"trainer.max_steps = {steps} ends before the first validation (trainer.val_check_interval = {every}), "
            f"so {so}; give --trainer.val_check_interval {steps} or less"
        )
    return None


def _refused_model_options(printed_config, argv: Sequence[str] = ()) -> str | None:
    """The family options and optimizers of a printed config checked as a run checks them (`--print_config` shows
    invalid ones as given, so that the run names them): the reason, or None. A `--model.family` in `argv` on a
    config of another family is refused as the run refuses it, naming the flags that give the family's own."""
    from ortholab.errors import ConfigError
    from ortholab.training.family_options import check_family_switch, resolve_family_args, resolve_optimizers

    model = printed_config.get("model") if isinstance(printed_config, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("family"), str):
        return None
    size = model.get("hidden_size")
    if isinstance(size, bool) or (size != "auto" and not (isinstance(size, int) and size > 0)):
        return f"model.hidden_size = {size!r} must be a positive integer, or auto with model.param_budget"
    flags = [str(arg).split("=", 1)[0] for arg in argv]  # the model keys given on the command line, as fit reads them
    given = sorted({f.removeprefix("--model.").split(".")[0] for f in flags if f.startswith("--model.")})
    try:
        check_family_switch(model, given)
        family_args = resolve_family_args(model["family"], model.get("family_args"))
        if isinstance(size, int) and 0 < size <= 1024:  # the groups are built at the run's size (ρ <= n and such)
            resolve_optimizers(model["family"], family_args, model.get("optimizers"), size)
    except ConfigError as refused:
        return str(refused)
    except (AttributeError, KeyError, TypeError, ValueError):  # a shape it does not know: the run names it
        return None
    return None
