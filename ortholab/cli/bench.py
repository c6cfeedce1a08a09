"""`ortholab bench`: the speed of every family against nn.RNN(relu) and nn.LSTM (ortholab/bench/families.py), or
with --suite one of the measurements beside it (ortholab/bench/suites/)."""

from __future__ import annotations

import argparse

from ortholab.cli.common import positive_ints
from ortholab.errors import ConfigError

USAGE = "bench [--families ...] [--sizes 16k,69k] [--batches 50,128] [--quick] [--json]"
HELP = "speed of every family against nn.RNN(relu) and nn.LSTM"


def add_arguments(parser) -> None:
    from ortholab.bench.suites.settings import SUITES, help_text

    parser.epilog, parser.formatter_class = help_text(), argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--suite",
        choices=["families", *SUITES],
        default="families",
        help="what to measure (default: families, the main table; the suites are listed below)",
    )
    parser.add_argument("--families", default=None, help="comma-separated families (default: all; a suite: one)")
    parser.add_argument("--sizes", default=None, help="parameter budgets: 16k, 69k (default: both)")
    parser.add_argument("--batches", default=None, help="batch sizes (default: 50,128; a suite: its own)")
    parser.add_argument("--seq-len", type=int, default=None, help="sequence length (default: 784; a suite: its own)")
    parser.add_argument(
        "--repeats", type=int, default=None, help="repetitions, the median reported (default: 5; a suite: its own)"
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available; a suite: cpu)")
    parser.add_argument(
        "--memory", default=None, help="sequence lengths for peak memory (default: 784,3136; '' to skip)"
    )
    parser.add_argument("--param", action="append", metavar="KEY=VALUE", help="a suite's own setting (repeatable)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="T=32, batch 8, 2 repeats, 16k only, no memory, where no flag says otherwise: a smoke run for CI "
        "(a suite: its quickest form)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="measure every family in this process instead of one process per family (--quick does)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")


QUICK = {"seq_len": 32, "batches": "8", "repeats": 2, "sizes": "16k", "memory": ""}  # --quick: a smoke run for CI
DEFAULTS = {"sizes": "16k,69k", "batches": "50,128", "seq_len": 784, "repeats": 5, "memory": "784,3136"}


def run(args, extra: list[str]) -> None:
    """`ortholab bench` from its parsed flags: the main table, or with --suite one of ortholab/bench/suites."""
    for flag, value in (("--seq-len", args.seq_len), ("--repeats", args.repeats)):
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} {value}: give a positive integer")
    if args.suite != "families":
        from ortholab.bench.suites import run_suite

        for flag, given in (("--memory", args.memory is not None), ("--in-process", args.in_process)):
            if given:
                raise ConfigError(f"{flag} is the main table's (--suite families), not --suite {args.suite}'s")
        flags = {name: getattr(args, name) for name in ("families", "sizes", "batches", "seq_len", "repeats", "device")}
        run_suite(args.suite, flags, args.param, args.quick, args.json)
        return
    if args.param:
        raise ConfigError(f"--param {args.param[0]}: the main table takes no --param; a --suite does (see --help)")
    given = {name: getattr(args, name) for name in DEFAULTS if getattr(args, name) is not None}
    values = {**DEFAULTS, **(QUICK if args.quick else {}), **given}  # as a suite's: flags given win over --quick
    import torch

    from ortholab.bench.families import run_bench

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    run_bench(
        args.families.split(",") if args.families else None,
        values["sizes"].split(","),
        positive_ints(values["batches"], "--batches"),
        values["seq_len"],
        values["repeats"],
        device,
        positive_ints(values["memory"], "--memory"),
        args.json,
        isolate=not (args.quick or args.in_process),
    )
