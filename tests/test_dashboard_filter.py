"""The Runs page's filter expression (app/filter_expr.py): what it keeps, how names resolve, and the one-line
message for each kind of mistake. Nothing in an expression is executed: it can only name values and compare."""

import pandas as pd
import pytest

from ortholab.app.filter_expr import FilterError, evaluate, parse, referenced, resolve

RUNS = pd.DataFrame(
    {
        "id": [1, 2, 3, 4],
        "family": ["scornn", "scornn", "lstm", "scurnn"],
        "status": ["finished", "failed", "finished", "running"],
        "steps": [1000, 200, 1000, 50],
        "tags": [["cpu", "sweep:rho"], [], ["baseline"], []],
        "duration (s)": [30.0, 90.0, None, 5.0],
    }
)
PARAMS = {
    "model.family_args.rho": [0.5, 0.2, None, None],
    "model.hidden_size": [64, 128, 64, 32],
    "data.init_args.dataset": ["mnist", "mnist", "mnist", None],
}
METRICS = {"val/acc": [0.95, 0.97, 0.85, float("nan")], "train/acc": [0.99, 0.99, 0.9, 0.5]}
KNOWN = [*RUNS.columns, *PARAMS, *METRICS]


def kept(text: str) -> list[int]:
    read = []

    def column(name):
        read.append(name)
        source = RUNS[name] if name in RUNS else PARAMS.get(name, METRICS.get(name))
        return pd.Series(list(source), index=RUNS.index, dtype=object)

    mask = evaluate(parse(text), RUNS, KNOWN, column)
    assert set(read) <= set(referenced(text, KNOWN)) if text.strip() else not read  # only what the text names
    return RUNS.loc[mask, "id"].tolist()


@pytest.mark.parametrize(
    "text, ids",
    [
        ('family = "scornn" and rho > 0.3 and val/acc > 0.9', [1]),  # the example
        ("family == 'scornn' or family = \"lstm\"", [1, 2, 3]),
        ('not status = "failed" and steps >= 1000', [1, 3]),
        ('(family in ("scornn", "scurnn") or steps < 100) and hidden_size != 128', [1, 4]),
        ('family not in ("scornn")', [3, 4]),
        ("rho not in (0.5)", [2]),  # missing: false for 'not in' too
        ("rho = null", [3, 4]),  # a missing value equals only null
        ("rho != null and rho <= 0.2", [2]),
        ("rho < 1", [1, 2]),  # and every other comparison with a missing value is false
        ("`duration (s)` < 60", [1, 4]),
        ('family ~ "CURN"', [4]),  # contains, any case
        ('tags = "cpu"', [1]),  # a list field: has the tag
        ("val/acc > 0.9", [1, 2]),  # NaN: missing
        ("model.hidden_size = 64 and dataset = 'mnist'", [1, 3]),
        ("  ", [1, 2, 3, 4]),
        ("steps > 1e2", [1, 2, 3]),
    ],
)
def test_filter_expressions_keep_the_matching_runs(text, ids):
    assert kept(text) == ids


@pytest.mark.parametrize(
    "text, message",
    [
        ("family = scornn", "no run field, param or metric is called 'scornn'; text values need quotes"),
        ("rhoo > 0.3", "did you mean model.family_args.rho? Or, if a text value, text values need quotes"),
        ("acc > 0.9", "'acc' could mean train/acc, val/acc: write the full name"),
        ('hidden_size > "64"', "model.hidden_size holds numbers (e.g. 64), compared with '64'; drop the quotes"),
        ("rho > 0.3 and", "at column 14: expected a name or a value, found the end"),
        ("rho 0.3", "at column 5: expected a comparison (= != < <= > >= ~ in) after 'rho', found '0.3'"),
        ("(rho > 0.3", "expected ')' closing the bracket"),
        ("rho > 0.3 steps", "at column 11: expected 'and', 'or' or the end, found 'steps'"),
        ("family in (scornn)", "the list after 'in' holds values; quote text"),
        ("rho > 0.3; __import__('os')", "at column 10: cannot read"),
        ("family not = 'x'", "'not' here must be followed by 'in'"),
        ("steps = true", "steps holds numbers (e.g. 1000), compared with True"),
    ],
)
def test_bad_expressions_get_one_line_saying_what_and_where(text, message):
    with pytest.raises(FilterError) as raised:
        kept(text)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_names_resolve_exactly_then_by_their_last_parts():
    known = ["family", "model.family_args.rho", "model.hidden_size", "val/acc", "train/acc", "Status"]
    assert resolve("family", known) == "family"
    assert resolve("rho", known) == "model.family_args.rho"
    assert resolve("family_args.rho", known) == "model.family_args.rho"
    assert resolve("status", known) == "Status"
    with pytest.raises(FilterError, match="could mean"):
        resolve("acc", known)
