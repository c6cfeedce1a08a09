"""`ortholab sweep`: a hyperparameter search through Optuna (ortholab/cli/sweep_study.py), every trial a recorded
run tagged with the sweep; several workers, on one machine or several, join a sweep through the store. Ctrl-C or
SIGTERM stop it with the running trial's checkpoint and exit 130 or 143; the same command again goes on."""

from __future__ import annotations

from ortholab.cli.common import DB_HELP

USAGE = "sweep --config FILE --space SPACE.yaml --trials N [--workers K] [--sampler grid|random|tpe]"
HELP = "hyperparameter search; every trial a recorded run tagged with the sweep"
EXTRA_FLAGS = True  # other --key value flags apply to every trial (e.g. --trainer.max_steps)


def add_arguments(parser) -> None:
    parser.add_argument("--config", required=True, help="the config every trial starts from")
    parser.add_argument(
        "--space",
        required=True,
        help="YAML: config keys -> a list of choices or a range {low, high[, log][, step]} (docs/sweeps.md)",
    )
    parser.add_argument("--trials", type=int, required=True, help="trials in all, over every worker")
    parser.add_argument("--workers", type=int, default=1, help="processes on this machine working on the sweep")
    parser.add_argument(
        "--sampler",
        choices=["grid", "random", "tpe"],
        default="tpe",
        help="how trials choose values: every combination once (grid), at random, or Optuna's TPE (default)",
    )
    parser.add_argument("--name", default=None, help="the sweep's name; workers with the same name and store join it")
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds the sampler of a new study (default 0); see docs/sweeps.md"
    )
    parser.add_argument(
        "--pruner",
        choices=["median", "none"],
        default="median",
        help="stop a trial whose validation is worse than the median of the completed trials' at the "
        "same step, once 5 have completed (Optuna's MedianPruner; default), or none",
    )
    parser.add_argument("--db", default=None, help=DB_HELP)


def run(args, extra: list[str]) -> None:
    from ortholab.extras import require_extra

    require_extra("sweeps")
    import os

    from ortholab.errors import ConfigError

    if not 0 <= args.seed <= 2**32 - 1:  # Optuna's samplers take numpy's seeds
        raise ConfigError(f"--seed {args.seed}: give a seed in 0 .. 2**32 - 1")

    from ortholab.cli import children
    from ortholab.cli.sweep_study import WORKER_ENV, report, run_sweep, summary_line

    with children.stopping_gracefully():  # Ctrl-C and SIGTERM stop the running trial with its checkpoint
        study = run_sweep(
            args.config,
            args.space,
            args.trials,
            db=args.db,
            name=args.name,
            sampler=args.sampler,
            seed=args.seed,
            workers=args.workers,
            extra=extra,
            pruner=args.pruner,
        )
    worker = os.environ.get(WORKER_ENV) == "1"  # one of the workers this sweep started: the starter sums up
    if stop := children.stopped_by():
        if not worker:
            print(
                f"sweep: stopped by {children.stop_name()}; the same command again goes on from there (a stopped "
                "trial is trained again from its start, with the same values)"
            )
            print(summary_line(study), flush=True)
        raise SystemExit(128 + stop)
    if not worker:
        print(report(study))
