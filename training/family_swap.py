"""`--model.family NEW` on a config file written for another family keeps the file's hidden size, which set that
family's parameter count: a note with both counts and the flags that size NEW to the same budget, as the papers
compare families (at equal parameters, not equal n)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SIZE_KEYS = ("family", "hidden_size", "param_budget")


def files_family(files: Sequence[Mapping[str, Any]]) -> tuple[str | None, dict]:
    """The family the config files name and its options (the last file's stand), as they give them."""
    family, options = None, {}
    for mapping in files:
        model = mapping.get("model")
        if not isinstance(model, dict):
            continue
        if model.get("family") and model["family"] != family:
            family, options = model["family"], {}
        if isinstance(model.get("family_args"), dict):
            options = model["family_args"]
    return family, dict(options)


def size_note(module, files: Sequence[Mapping[str, Any]], given_on_command_line: Sequence[str]) -> str | None:
    """The note for a family swapped on the command line with the file's numeric hidden size kept; None otherwise
    (the size or the budget given too, `hidden_size: auto`, no swap)."""
    from ortholab.training.module import RecurrentModule

    hparams = module.hparams
    if "family" not in given_on_command_line or {"hidden_size", "param_budget"} & set(given_on_command_line):
        return None
    theirs, options = files_family(files)
    if theirs is None or theirs == hparams.family or hparams.param_budget is not None:
        return None
    try:  # the file's own model at the same size: its parameter count is the budget the file meant
        original = RecurrentModule(
            hparams.task, family=theirs, hidden_size=hparams.hidden_size, family_args=options,
            num_layers=hparams.num_layers, input_adapter=hparams.input_adapter,
            input_adapter_size=hparams.input_adapter_size,
        )  # fmt: skip
    except Exception:  # the file's family cannot be built as given: nothing to compare with
        return None
    budget, ours = sum(original.parameter_counts().values()), sum(module.parameter_counts().values())
    if budget == ours:
        return None
    return (
        f"note: model.hidden_size {hparams.hidden_size} is the config's size for {theirs} ({budget:,} parameters); "
        f"{hparams.family} has {ours:,} at it; `--model.hidden_size auto --model.param_budget {budget}` sizes "
        f"{hparams.family} to the same budget"
    )
