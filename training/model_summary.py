"""The layer table a run prints before it trains: Lightning's, less its FLOPs column and total, which Lightning
counts only by running a model's `example_input_array` (none here has one: the sequence length is the task's), so
every run printed 'Total FLOPs: 0'. Counted FLOPs (a user's own module with an example input) are shown."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelSummary, RichModelSummary
from lightning.pytorch.utilities.model_summary import get_formatted_model_size, get_human_readable_count

FLOPS_COLUMN = "FLOPs"


class LayerSummary(ModelSummary):
    """Lightning's summary, printed with rich as its default is, without a FLOPs count nobody made."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int = 0,
        **summarize_kwargs: Any,
    ) -> None:
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != FLOPS_COLUMN or total_flops]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for name, _ in columns:
            table.add_column(name, justify="right" if name in ("Params", FLOPS_COLUMN) else "left", no_wrap=True)
        for row in zip(*(values for _, values in columns)):
            table.add_row(*map(str, row))
        totals = Table.grid()
        totals.add_row(f"[bold]Trainable params[/]: {get_human_readable_count(int(trainable_parameters))}")
        totals.add_row(
            f"[bold]Non-trainable params[/]: {get_human_readable_count(total_parameters - trainable_parameters)}"
        )
        totals.add_row(f"[bold]Total params[/]: {get_human_readable_count(int(total_parameters))}")
        totals.add_row(f"[bold]Total estimated model params size (MB)[/]: {get_formatted_model_size(model_size)}")
        if total_flops:
            totals.add_row(
                f"[bold]Total FLOPs[/] (one forward of the example input): {get_human_readable_count(total_flops)}"
            )
        console = get_console()
        console.print(table)
        console.print(totals)


def replace_lightnings_summary(callbacks: list, configured: list) -> list:
    """The callbacks with Lightning's own default summary (added when none is configured) replaced by LayerSummary;
    a summary among `configured` (the user's) is kept as given."""
    default = (ModelSummary, RichModelSummary)
    return [
        LayerSummary() if type(callback) in default and not any(callback is mine for mine in configured) else callback
        for callback in callbacks
    ]
