"""`ortholab fit|validate|test|predict`: Lightning's CLI (ortholab/training/lightning_cli.py) after the shortcuts a
user types: `configs/...` names from any folder, `fit --resume ID`, `predict --run ID`, task short names
(`--data.class_path mnist`), `--model.optimizers.other.lr` as one key, and `--model.family_args.help NAME`."""

from __future__ import annotations

import sys
from pathlib import Path

from ortholab.cli.common import OneLineParser
from ortholab.db.masking import MaskedStream, known_passwords
from ortholab.errors import ConfigError

HELP_ENTRIES = (
    (
        "fit|validate|test|predict --config FILE [--key value ...] [--db URL]",
        "Lightning CLI (see `ortholab fit --help`, `--print_config`)",
    ),
    ("fit --resume ID [--key value ...]", "continue a stopped run from its last checkpoint, as the same run"),
    (
        "predict --run ID [--checkpoint best|last|PATH] [--predict_split test|val|train]",
        "a recorded run's predictions, written into a predict run linked to it",
    ),
    (
        "test|validate --run ID [--checkpoint best|last|PATH]",
        "a recorded run's checkpoint scored on the test or validation split, recorded as a run of its own",
    ),
)
USAGE, HELP = HELP_ENTRIES[0]
EVALUATING = {"predict": "predicting", "test": "testing", "validate": "validating"}  # their `--run ID` form
RUN_CHECKPOINTS = (None, "best", "last")  # --checkpoint of the run's own folder (not a PATH of one's own)
PREDICT_ONLY = " [--predict_split test|val|train]"
EVALUATE_HELP = """ortholab predict --run ID [--checkpoint best|last|PATH] [--predict_split test|val|train] [--db URL]
  --run ID         a recorded run: its stored config, store and checkpoint (`ortholab runs` lists the ids)
  --checkpoint     best (default; its last.ckpt where it kept none or still trains), last, a file name of its
                   checkpoints folder, or a file's path
  A new run of stage predict records what it computes (docs/cli.md#ortholab-predict).
Or Lightning's form, with the config the checkpoint was trained with: every key below.
  ortholab predict --config CONFIG.yaml --ckpt_path FILE [--key value ...]"""


def main(argv: list[str], given: bool) -> None:
    """Run Lightning's CLI on `argv` (`given`: argv did not come from sys.argv, so it is passed on explicitly)."""
    if "--model.family_args.help" in argv:
        from ortholab.training.family_options import describe_options

        at = argv.index("--model.family_args.help")
        if at + 1 >= len(argv):
            raise ConfigError(
                "--model.family_args.help needs a family name, e.g. `ortholab fit "
                "--model.family_args.help scornn` (`ortholab list families` names them)"
            )
        print(describe_options(argv[at + 1]))
        return
    if argv[0] in EVALUATING and ("--help" in argv or "-h" in argv):  # Lightning's help knows only --config
        shown = EVALUATE_HELP if argv[0] == "predict" else EVALUATE_HELP.replace(PREDICT_ONLY, "")
        print(shown.replace("predict", argv[0]) + "\n", flush=True)
    from ortholab.training.config_files import check_config_files, long_config_flags, packaged_configs

    long = long_config_flags(argv)  # `-c FILE` is `--config FILE` to every check below
    check_config_files(long)  # before torch's and Lightning's imports (~5 s): a config file's mistake is told at once
    if not given:  # the console script: a training process (ortholab/cli/main.py)
        from ortholab.training.subnormals import flush_subnormals

        flush_subnormals()
    from ortholab.training.lightning_cli import OrthoLabCLI, task_short_names
    from ortholab.training.mapping_flags import merge_deep_mapping_flags
    from ortholab.training.parse_errors import with_place
    from ortholab.user_errors import user_error

    typed = argv  # as the user wrote it, for saying where a refused key was given
    prepared = merge_deep_mapping_flags(task_short_names(resume_arguments(run_arguments(packaged_configs(long)))))
    # --data.class_path mnist: the task's class; --model.optimizers.other.lr: that option, not the whole group
    if prepared != argv:
        given, argv = True, prepared
    stdout = sys.stdout
    if "--print_config" in argv or any(a.startswith("--print_config=") for a in argv):
        sys.stdout = MaskedStream(stdout, known_passwords([*argv, *sys.argv]))  # it prints db: too
    try:
        OrthoLabCLI(args=argv if given else None, typed=typed)  # Lightning reads sys.argv itself
    except Exception as failed:  # a model's or task's own check names its key: where the user gave it, too
        refused = user_error(failed)  # a task's check arrives wrapped in jsonargparse's union error
        placed = with_place(str(refused), typed) if isinstance(refused, ConfigError) else None
        if placed is None or placed == str(refused):
            raise
        raise ConfigError(placed) from failed
    finally:
        sys.stdout = stdout


def resume_arguments(argv: list[str]) -> list[str]:
    """`fit --resume ID [...]`: the run's stored config first (unless --config is given) and its last checkpoint
    (unless --ckpt_path is given), so that a preempted run continues with one short command."""
    from ortholab.db import Store, StoreError, folder_lock
    from ortholab.db.logger import runs_folder_of
    from ortholab.training.callbacks.lifecycle import check_resume_checkpoint

    peek = OneLineParser(prog="ortholab fit", add_help=False, allow_abbrev=False)
    peek.add_argument("--resume")  # a run's id, or its name (the newest run of that name not finished)
    peek.add_argument("--db")
    peek.add_argument("--config", action="append")
    peek.add_argument("--ckpt_path")
    known, _ = peek.parse_known_args(argv[1:])
    if known.resume is None:
        return argv
    if argv[0] != "fit":
        raise ConfigError(f"--resume continues training: use `ortholab fit --resume {known.resume}`")
    store = Store(known.db, access="write")  # a mistyped --db is not a new, empty store
    run_id = resumed_run_id(store, known.resume)
    if str(run_id) != known.resume:  # a name: Lightning's parser takes the id
        argv = with_resume_id(argv, run_id)
    run = store.get_run(run_id)  # StoreError naming the id and the store when it is missing
    say_environment(run)
    if run.stage not in (None, "fit"):  # test, validate, predict: nothing trained, no checkpoint to go on from
        raise ConfigError(
            f"run {run.id} is a {run.stage} run, which trains nothing, so there is nothing to continue; --resume "
            f"continues a fit run (`ortholab runs` lists each run's stage)"
        )
    busy = store.lease_holder(run.id) if launched_rank() == 0 else None  # its process still runs: two writers
    if busy is not None:  # would double its points (another rank of this resume finds rank 0 holding it: no check)
        raise StoreError(busy)
    run_dir = Path(run.run_dir or "")
    if run.run_dir and not run_dir.is_dir() and (moved := moved_folder(store.url, run_dir)) is not None:
        raise ConfigError(  # `mv runs elsewhere`: the store records each run folder by its absolute path
            f"run {run.id}'s folder {run_dir} is not there, but {moved} is: the store was moved, and it records its "
            f"run folders by their path; move it back, or link the old place to the new one (ln -s "
            f"{runs_folder_of(moved)} {runs_folder_of(run_dir)}), to continue it"
        )
    if run.run_dir and not run_dir.is_dir():  # another machine's folder (a node of a multi-node run, a new machine)
        raise ConfigError(
            f"run {run.id}'s folder {run_dir} is not on this machine, so its config and checkpoints are not here: "
            f"continue it where that folder is, or keep run folders on a disk every machine sees (--runs_dir or "
            f"$ORTHOLAB_RUNS; docs/gpus.md); an export's runs come back with `ortholab restore DIR --runs-dir FOLDER`"
        )
    if run.run_dir and (other := folder_lock.other_store(run_dir, store.store_id, store.url)) is not None:
        raise ConfigError(  # a byte copy of a SQLite store records the original's folders: training would overwrite
            f"run {run.id}'s folder {run_dir} was written by the store at {other}, not by this one "  # its checkpoints
            f"({folder_lock.store_place(store.url)}): a copy of a store shares the original's run folders, so "
            f"training here would overwrite that store's checkpoints and leave a gap in its history; continue run "
            f"{run.id} with --db pointing at that store"
        )
    if run.status == "finished" and not known.config and known.ckpt_path is None:
        refuse_a_finished_run_that_would_stop_at_once(run.id, run_dir / "config.yaml", argv)
    config, last = run_dir / "config.yaml", run_dir / "checkpoints" / "last.ckpt"
    extra, own = [], []
    if not known.config and not config.is_file() and not last.is_file():
        raise ConfigError(
            f"run {run.id} stopped before it recorded its config or a checkpoint ({run.status}"
            f"{': ' + run.reason if run.reason else ''}), so there is nothing to continue: start it anew with the "
            f"command that started it (`ortholab runs delete {run.id}` removes this one)"
        )
    if not known.config:
        if not config.is_file():
            raise ConfigError(f"run {run.id} has no stored config at {config}; pass --config FILE as well")
        extra += ["--config", str(config), "--db", store.url]  # the stored config's db has its password masked
    if known.ckpt_path is None:
        if not last.is_file():
            held = sorted((p for p in last.parent.glob("*.ckpt") if p.is_file()), key=lambda p: p.stat().st_mtime)
            if held:  # last.ckpt deleted by hand: the newest other checkpoint is offered, not a new run
                raise ConfigError(
                    f"run {run.id} has no checkpoint at {last}, but its folder holds "
                    f"{', '.join(sorted(p.name for p in held))}: continue from one of them with --ckpt_path "
                    f"{held[-1]} (the run's record goes back to its step)"
                )
            raise ConfigError(
                f"run {run.id} has no checkpoint at {last} (it stopped before its first checkpoint, written at its "
                f"first validation); start a new run instead"
                f"{f': `ortholab fit --config {config}`' if config.is_file() else ''} (`ortholab runs delete {run.id}` "
                f"removes this one)"
            )
        own = ["--ckpt_path", str(last)]  # after the user's flags: a --config file's ckpt_path (the checkpoint the
        # run started from, as its stored config.yaml holds it) must not stand over the checkpoint checked below
    if known.ckpt_path is not None and Path(known.ckpt_path).is_dir():  # the .ckpt files in it, as without --resume
        from ortholab.training.preflight import check_ckpt_path

        check_ckpt_path(known.ckpt_path, "fit")
    point = check_resume_checkpoint(Path(known.ckpt_path) if known.ckpt_path else last, store, run.id, last.parent)
    refuse_a_limit_the_checkpoint_has_passed(run.id, point, argv)
    return [argv[0], *extra, *argv[1:], *own]


def moved_folder(store_url: str, run_dir: Path) -> Path | None:
    """The run folder where a moved SQLite store's folder now is: the same store-ID/NAME/RUN under the folder that
    holds the store's file (where a store's runs folder keeps it); None where it is not there."""
    from ortholab.db.logger import runs_folder_of
    from ortholab.db.sqlite_files import sqlite_file

    file = sqlite_file(store_url)
    if file is None:
        return None
    there = file.parent / run_dir.relative_to(runs_folder_of(run_dir))
    return there if there != run_dir and there.is_dir() else None


def resumed_run_id(store, value: str) -> int:
    """`--resume`'s run: an id as given, or, for a run's name (a job script that does not know the id: a requeued
    SLURM job), the newest run of that name that has not finished."""
    if value.strip().isdigit():
        return int(value)
    named = [run for run in store.list_runs() if run.name == value and run.stage == "fit"]  # newest first
    if not named:
        raise ConfigError(
            f"--resume {value}: no run in {store.display_url} has that id or name; give a run's id or name "
            f"(`ortholab runs` lists them)"
        )
    going_on = [run for run in named if run.status != "finished"]
    if not going_on:
        raise ConfigError(
            f"--resume {value}: every run named {value!r} has finished (the newest is run {named[0].id}); "
            f"nothing to continue"
        )
    if launched_rank() == 0:
        print(f"--resume {value}: run {going_on[0].id}, the newest run of that name not finished", flush=True)
    return going_on[0].id


def with_resume_id(argv: list[str], run_id: int) -> list[str]:
    """`argv` with its --resume value (`--resume NAME` or `--resume=NAME`) replaced by `run_id`."""
    out, skip = [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
        elif arg == "--resume" and i + 1 < len(argv):
            out += ["--resume", str(run_id)]
            skip = True
        elif arg.startswith("--resume="):
            out.append(f"--resume={run_id}")
        else:
            out.append(arg)
    return out


def launched_rank() -> int:
    """This process's global rank as its launcher set it (torchrun's RANK, SLURM's SLURM_PROCID, Lightning's own
    children); 0 for a process started alone."""
    from lightning.fabric.utilities.rank_zero import _get_rank

    return _get_rank() or 0


def refuse_a_finished_run_that_would_stop_at_once(run_id: int, config: Path, argv: list[str]) -> None:
    """`fit --resume` of a finished run goes on only with a limit above the one it reached (trainer.max_steps or
    max_epochs, or any max_time): otherwise it would restore, stop at once and say nothing."""
    import yaml

    try:
        trainer = (yaml.safe_load(config.read_text()) or {}).get("trainer") or {}
    except (OSError, yaml.YAMLError):
        return  # no stored config: the resume's own checks name that
    given = given_limits(argv)
    if "max_time" in given:
        return
    if trainer.get("max_time") is not None:  # the time it trained is in its checkpoint (Lightning's Timer): a larger
        raise ConfigError(  # step count alone would restore the spent time and stop again at once
            f"run {run_id} is finished: its config stops it at trainer.max_time = {trainer['max_time']!r} too, which "
            f"it may have spent (the time trained so far counts); give more time, or none: `ortholab fit --resume "
            f"{run_id} --trainer.max_time null` (with --trainer.max_steps N to train to another step count)"
        )
    for key, value in given.items():
        before = trainer.get(key)
        try:
            if before in (None, -1) or int(value) == -1 or int(value) > before:
                return
        except (TypeError, ValueError):
            return  # not a number: the CLI names the value
    limits = ", ".join(f"trainer.{key} = {trainer.get(key)}" for key in ("max_steps", "max_epochs"))
    raise ConfigError(
        f"run {run_id} is finished: it reached its limits ({limits}), so it would stop at once; to train it further, "
        f"give a larger one, e.g. `ortholab fit --resume {run_id} --trainer.max_steps N`"
    )


def given_limits(argv: list[str]) -> dict[str, str]:
    """The trainer limits given on the command line (`--trainer.max_steps N` or `--trainer.max_steps=N`, the last
    one of each), by key (`max_steps`), as written."""
    given = {}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in ("--trainer.max_steps", "--trainer.max_epochs", "--trainer.max_time"):
            given[flag[len("--trainer.") :]] = value if eq else argv[i + 1] if i + 1 < len(argv) else ""
    return given


def _given_limit(argv: list[str], key: str) -> tuple[str | None, int | None]:
    """`--trainer.KEY`'s value as written and as a number; None for a value that is none (absent, -1 for no limit,
    null or a typo, which the CLI names)."""
    value = given_limits(argv).get(key)
    try:
        limit = int(value) if value is not None else None
    except ValueError:
        return value, None
    return value, None if limit == -1 else limit


def refuse_a_limit_the_checkpoint_has_passed(run_id: int, point, argv: list[str]) -> None:
    """`fit --resume ID --trainer.max_steps N` with N below the step of the checkpoint it loads, or
    `--trainer.max_epochs E` with E below the epochs it had begun: Lightning would restore it, stop at once and record
    the run finished (exit 0) past the limit, ending a run the user meant to extend. Refused before anything is
    recorded. A limit the checkpoint ends exactly at (its step; the epochs it ended, checkpointed at an epoch's end)
    ends the run there, as asked; so may `fit --resume ID` alone, for a run stopped after its last checkpoint at its
    config's limit."""
    value, limit = _given_limit(argv, "max_steps")
    if point.step is not None and limit is not None and limit < point.step:
        raise ConfigError(
            f"--trainer.max_steps {value}: run {run_id} continues from its checkpoint at step {point.step}, past that "
            f"limit, so it would stop at once and be recorded finished; give N of {point.step} or more (`ortholab fit "
            f"--resume {run_id} --trainer.max_steps N`: {point.step} ends it at its checkpoint)"
        )
    value, limit = _given_limit(argv, "max_epochs")
    begun, ended = point.epochs_begun, point.epochs_ended
    if begun is None or ended is None or limit is None or limit >= begun:
        return
    where = f"inside its epoch {begun}" if begun > ended else f"after its epoch {ended}"
    ends = f"{begun} ends it with that epoch" if begun > ended else f"{ended} ends it at its checkpoint"
    raise ConfigError(
        f"--trainer.max_epochs {value}: run {run_id} continues from its checkpoint at step {point.step}, {where} "
        f"(counted from 1), past that limit, so it would stop at once and be recorded finished; give E of {begun} or "
        f"more (`ortholab fit --resume {run_id} --trainer.max_epochs E`: {ends})"
    )


def run_arguments(argv: list[str]) -> list[str]:
    """`predict|test|validate --run ID [--checkpoint best|last|PATH]`: the run's stored config, its checkpoint, its
    store and name, as LightningCLI's `predict --config ... --ckpt_path ...` takes them. Other argv is returned as
    it is."""
    if not argv or argv[0] not in EVALUATING:
        return argv
    command, doing = argv[0], EVALUATING[argv[0]]
    peek = OneLineParser(prog=f"ortholab {command}", add_help=False, allow_abbrev=False)  # `--run abc`: one line
    peek.add_argument("--run", type=int)
    peek.add_argument("--checkpoint", default=None)
    peek.add_argument("--db")
    peek.add_argument("--config", action="append")
    peek.add_argument("--ckpt_path")
    peek.add_argument("--name")
    peek.add_argument("--predict_split")
    known, _ = peek.parse_known_args(argv[1:])
    if command == "predict":  # before the checkpoint is chosen and said: a bad split is the one line
        from ortholab.training.callbacks.predictions import check_predict_split

        check_predict_split(known.predict_split)
    if known.run is None:
        if known.checkpoint is not None:
            raise ConfigError(
                "--checkpoint picks a checkpoint of a recorded run: give --run ID as well, or --ckpt_path FILE"
            )
        return argv
    from ortholab.db import Store
    from ortholab.training.checkpoint_choice import best_or_last, run_checkpoint

    store = Store(known.db, access="read")  # a reader: a mistyped --db is reported, never made into a new store
    run = store.get_run(known.run)  # StoreError naming the id and the store when it is missing
    say_environment(run)
    if not run.run_dir:
        raise ConfigError(f"run {run.id} has no run folder recorded, so no checkpoint to {command} with")
    run_dir = Path(run.run_dir)
    refuse_a_second_checkpoint(known, run_dir, (run.config or {}).get("ckpt_path"))
    if not run_dir.is_dir() and (not known.config or (known.ckpt_path is None and known.checkpoint in RUN_CHECKPOINTS)):
        raise ConfigError(  # a store shared by several machines: each run's folder stays where it trained
            f"run {run.id}'s folder {run_dir} (recorded on {run.hostname or 'another machine'}) is not on this "
            f"machine, so its config and checkpoints are not here: {command} it where that folder is, give copies of "
            f"them (--config FILE --checkpoint PATH), or keep run folders on a disk every machine sees (--runs_dir or "
            f"$ORTHOLAB_RUNS); an export's runs come back with `ortholab restore DIR --runs-dir FOLDER`"
        )
    choice = known.checkpoint or best_or_last(run_dir)
    if choice == "last" and known.checkpoint is None and known.ckpt_path is None:
        print(
            f"note: run {run.id} kept no best-step checkpoint (training ended before its first validation); "
            f"{doing} with its last.ckpt",
            file=sys.stderr,
        )
    if choice == "best" and known.ckpt_path is None and store.lease_holder(run.id) is not None:
        # training deletes a best-step file whenever a better one is saved; last.ckpt is replaced atomically
        choice = "last"
        print(
            f"note: run {run.id} is still being written (training deletes its best-step checkpoints as better ones "
            f"are saved); {doing} with its last.ckpt, which stays",
            file=sys.stderr,
        )
    rest = without_options(argv[1:], ("--run", "--checkpoint", "--config"))
    # a config file's values replace the flags before it: the given ones go first, or their `ckpt_path: null` (a
    # stored config.yaml's) dropped the run's checkpoint and the untrained model was evaluated
    extra = only_options(argv[1:], ("--config",))
    if not known.config:
        config = run_dir / "config.yaml"
        if not config.is_file():
            raise ConfigError(f"run {run.id} has no stored config at {config}; pass --config FILE as well")
        extra += ["--config", str(config)]
    extra += ["--db", store.url]  # a stored config's db has its password masked; a --db given comes after
    if known.ckpt_path is None:
        try:
            checkpoint = run_checkpoint(run.id, run_dir, choice, flag="--checkpoint", default=not known.checkpoint)
        except ValueError as error:  # what the run holds, in the command line's words
            raise ConfigError(str(error)) from None
        if known.checkpoint not in RUN_CHECKPOINTS:  # a file of one's own: one line if it is none (a config.yaml)
            from ortholab.training.checkpoint_files import check_checkpoint_file

            resolved = "" if str(checkpoint) == known.checkpoint else f" ({checkpoint})"  # a name in its folder
            check_checkpoint_file(checkpoint, said=f"--checkpoint {known.checkpoint}{resolved}")
        extra += ["--ckpt_path", str(checkpoint)]
    if known.name is None:
        extra += ["--name", run.name]
    return [command, *extra, *rest]


def say_environment(run) -> None:
    """A note for each variable the run was trained with ($ORTHOLAB_DATA, ...) that this shell lacks or sets
    otherwise (one process of a multi-process launch says it)."""
    from ortholab.db.provenance import environment_notes

    if launched_rank() == 0:
        for note in environment_notes(run.id, (run.info or {}).get("environment")):
            print(note, file=sys.stderr)


def refuse_a_second_checkpoint(known, run_dir: Path, started: object = None) -> None:
    """`--run ID` with a checkpoint chosen twice, one of them silently dropped: `--checkpoint` beside `--ckpt_path`
    (which stood), or a --config file's `ckpt_path:` (the run's checkpoint, added after it, stood). One line naming
    both, to give one. The run's own stored config.yaml, given as --config, is read as it is without; so is a copy
    of it, whose ckpt_path is `started`, the one the run's recorded config holds (the checkpoint its fit started
    from): the refusal of a run whose folder is elsewhere says to give copies of its config and checkpoint."""
    run = f"--run {known.run}"
    if known.checkpoint is not None and known.ckpt_path is not None:
        raise ConfigError(
            f"--checkpoint {known.checkpoint} and --ckpt_path {known.ckpt_path} both choose the checkpoint: give one "
            f"of them, --checkpoint best|last|PATH (one of run {known.run}'s, or a file) or --ckpt_path FILE"
        )
    own = run_dir / "config.yaml"
    held = None if known.ckpt_path is not None else config_ckpt_path(known.config or [], own, started)
    if held is not None:
        file, value = held
        chosen = f"{run} --checkpoint {known.checkpoint}" if known.checkpoint is not None else run
        raise ConfigError(
            f"ckpt_path = {value} (in {file}) and {chosen} both choose the checkpoint ({run} takes run {known.run}'s, "
            f"--checkpoint best|last|PATH which one): drop one of them, the file's key (or set it to null) or --run"
        )


def config_ckpt_path(configs: list[str], own: Path, started: object = None) -> tuple[str, object] | None:
    """(file, value) of the last of the --config `configs` that holds a `ckpt_path:` key, where its value is one
    (not null); None otherwise, and where that file is `own`, the run's stored config.yaml (its key: the checkpoint
    its fit started from), read as without --config, or a copy of it: its value is `started`, the run's recorded
    ckpt_path. A missing or bad file: the parser names it."""
    import contextlib

    import yaml

    held = None
    for file in configs:
        with contextlib.suppress(OSError, yaml.YAMLError, UnicodeDecodeError):
            mapping = yaml.safe_load(Path(file).read_text(encoding="utf-8"))
            if isinstance(mapping, dict) and "ckpt_path" in mapping:  # the last file's value stands
                held = (file, mapping["ckpt_path"])
    if held is None or held[1] is None or held[1] == started or Path(held[0]).resolve() == own.resolve():
        return None
    return held


def only_options(args: list[str], keys: tuple[str, ...]) -> list[str]:
    """The options `keys` of `args` with their values, in their order: what `without_options` leaves out."""
    out, take = [], False
    for arg in args:
        if take or arg.split("=", 1)[0] in keys:
            out.append(arg)
            take = not take and "=" not in arg
        else:
            take = False
    return out


def without_options(args: list[str], keys: tuple[str, ...]) -> list[str]:
    """`args` without the options `keys` and their values (`--key value` or `--key=value`)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        key = arg.split("=", 1)[0]
        if key in keys:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out
