"""The `ortholab` command line: one module per command, registered below in the order `ortholab --help` lists them.

A command module defines USAGE (its line in `ortholab --help`), HELP (one sentence: the top help and the description
of `ortholab NAME --help`), `add_arguments(parser)` and `run(args, extra)`; EXTRA_FLAGS = True where other `--key
value` flags pass on to the runs it starts. `train` is the exception: fit/validate/test/predict go to Lightning's CLI.
docs/cli.md shows each USAGE (tests/test_architecture.py checks). Adding a command is one new module here and one line
in COMMANDS, then its docs (docs/architecture.md, "Adding something"). A command module imports torch, Lightning or
Optuna only inside its run(): `ortholab --help` imports every command module, and `ortholab runs` starts fast.
"""

COMMANDS = {  # command -> its module in this package
    "fit": "train",  # fit, validate, test, predict: Lightning's CLI (ortholab/training/lightning_cli.py)
    "validate": "train",
    "test": "train",
    "predict": "train",
    "runs": "runs",
    "list": "listing",
    "data": "data",
    "sweep": "sweep",
    "evaluate-audio": "evaluate_audio",
    "bench": "bench",
    "reproduce": "reproduce",
    "report": "report",
    "restore": "restore",
    "db": "database",
    "dashboard": "dashboard",
    "docs": "docs",
}
