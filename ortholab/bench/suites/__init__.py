"""`ortholab bench --suite NAME`: the measurements beside the main table (`ortholab/bench/families.py`), one module
each.

Each suite has its settings in `settings.py` (torch-free, for the CLI's help) and a module with `run(settings)`
that returns a `common.SuiteResult`: the medians it timed and their ratios.
"""

from __future__ import annotations

import importlib

from ortholab.bench.suites.settings import SUITES, resolve


def run_suite(name: str, flags: dict, params: list[str] | None, quick: bool, as_json: bool) -> None:
    """Resolve the suite's settings from the command's flags, run it and print its result."""
    from ortholab.bench.suites.common import render

    settings = resolve(name, flags, params, quick)
    if getattr(settings, "device", None):  # a device this machine lacks: one line before anything is measured
        from ortholab.bench.families import check_device

        check_device(settings.device)
    module = importlib.import_module(f"ortholab.bench.suites.{name.replace('-', '_')}")
    print(render(module.run(settings), as_json))


__all__ = ["SUITES", "run_suite"]
