"""The papers' published numbers (configs/papers/published/*.yaml): schema, links to configs, values against the papers.

Each file is one table or figure of one paper; each row one published number (or, for a figure, a qualitative
outcome) with the OrthoLab config that reproduces it. The paper texts live outside the repository
(../shared/papers); the checks that read them are skipped where they are missing.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from ortholab.datamodules import TASKS
from ortholab.db.published import load_table, twins
from ortholab.models import FAMILIES

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "configs" / "papers" / "published"
PAPERS = REPO.parent / "shared" / "papers"
FILES = sorted(PUBLISHED.glob("*.yaml"))

FILE_KEYS = ["paper", "table", "title", "metric", "mode", "scale", "rows"]
ROW_KEYS = [
    "row",
    "task",
    "setting",
    "family",
    "hidden_size",
    "parameters",
    "value",
    "outcome",
    "expect",
    "config",
    "notes",
]
ROW_OPTIONAL = {"metric", "mode", "scale", "args"}  # per-row overrides of the file's keys; args: extra CLI flags
EXPECTS = {None, "below_baseline", "above_baseline", "at_baseline"}
# families the rows may name before OrthoLab has them (their rows carry config: null, "family pending: <name>")
PENDING_FAMILIES = {"urnn", "fcurnn", "eurnn", "exprnn", "nru", "nnrnn", "rtransformer"}
# what each task logs per evaluation split (training/objectives.py; speech: datamodules/speech.py,
# ortholab/evaluation/audio.py)
SPLIT_METRICS = {
    "copying": {"loss", "acc"},
    "adding": {"loss"},
    "mnist": {"loss", "acc"},
    "music": {"loss", "nll"},
    "text": {"loss", "bpc", "acc"},
    "generation": {"loss", "nmse"},
    "speech": {"loss", "mse_valid_frames", "mse_with_padding"},
}
AUDIO_METRICS = {"segsnr_voicebox", "stoi", "pesq_nb_mos_lqo", "pesq_wb_mos_lqo"}
TIMING_METRIC = "time/epoch_s"  # training/callbacks/timing.py
TASK_OF_CLASS = {cls.__name__: name for name, cls in TASKS.items()}


@cache
def load(path: Path) -> dict:
    """The parsed file, read once per session (tests only read it)."""
    return yaml.safe_load(path.read_text())


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def metric_known(metric: str, task: str) -> bool:
    if metric == TIMING_METRIC:
        return True
    split, _, name = metric.partition("/")
    if split in ("val", "test"):
        return name in SPLIT_METRICS[task]
    return task == "speech" and split in ("val_audio", "test_audio") and name in AUDIO_METRICS


def effective(row: dict, doc: dict, key: str):
    return row.get(key, doc[key])


def all_rows():
    return [(path.name, row) for path in FILES for row in load(path)["rows"]]


def test_there_are_published_tables():
    assert len(FILES) >= 10
    assert sum(len(load(path)["rows"]) for path in FILES) > 100


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_file_schema(path):
    doc = load(path)
    assert list(doc) == FILE_KEYS, f"{path.name}: top-level keys must be exactly {FILE_KEYS}"
    for key in ("paper", "table", "title", "metric"):
        assert isinstance(doc[key], str) and doc[key].strip(), f"{path.name}: {key} must be a non-empty string"
    assert re.fullmatch(r"(Table|Figure|Section) .+", doc["table"]), f"{path.name}: table {doc['table']!r} as printed"
    assert path.name.startswith(doc["paper"].split("-")[0] + "_"), f"{path.name}: name it <paper>_<table>.yaml"
    assert doc["mode"] in ("min", "max")
    assert is_number(doc["scale"]) and doc["scale"] > 0
    assert isinstance(doc["rows"], list) and doc["rows"], f"{path.name}: no rows"
    ids = [row.get("row") for row in doc["rows"]]
    assert len(ids) == len(set(ids)), f"{path.name}: repeated row ids {sorted({i for i in ids if ids.count(i) > 1})}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_dashboard_and_reproduce_read_the_file(path):
    table = load_table(path)  # db/published.py, as `ortholab reproduce` / `report` and the Papers page read it
    assert [row.row for row in table.rows] == [row["row"] for row in load(path)["rows"]]


@pytest.mark.parametrize("name, row", all_rows(), ids=lambda x: x if isinstance(x, str) else x.get("row"))
def test_row_schema(name, row):
    doc = load(PUBLISHED / name)
    where = f"{name}: {row.get('row')}"
    missing = [key for key in ROW_KEYS if key not in row]
    unknown = sorted(set(row) - set(ROW_KEYS) - ROW_OPTIONAL)
    assert not missing and not unknown, f"{where}: missing {missing}, unknown {unknown}"
    assert isinstance(row["row"], str) and re.fullmatch(r"[A-Za-z0-9-]+(_[A-Za-z0-9]+)+", row["row"]), where
    assert row["row"].split("_")[1] == row["family"], f"{where}: ids read <task-setting>_<family>_<size>"
    assert row["task"] in TASKS, f"{where}: task {row['task']!r} is not one of {sorted(TASKS)}"
    assert row["family"] in set(FAMILIES) | PENDING_FAMILIES, f"{where}: unknown family {row['family']!r}"
    assert isinstance(row["setting"], str) and row["setting"].strip(), where
    for key in ("hidden_size", "parameters"):
        assert row[key] is None or (isinstance(row[key], int) and not isinstance(row[key], bool) and row[key] > 0), (
            f"{where}: {key} must be a positive int or null"
        )
    assert row["value"] is None or is_number(row["value"]), where
    assert row["outcome"] is None or (isinstance(row["outcome"], str) and row["outcome"].strip()), where
    assert row["value"] is not None or row["outcome"] is not None, f"{where}: neither a value nor an outcome"
    assert row["expect"] in EXPECTS, f"{where}: expect must be one of {EXPECTS}"
    assert row["expect"] is None or row["value"] is None, f"{where}: expect is for qualitative rows"
    assert row["config"] is None or isinstance(row["config"], str), where
    assert isinstance(row["notes"], str) and row["notes"].strip(), f"{where}: notes must say where the number is from"
    assert isinstance(row.get("args", []), list) and all(isinstance(a, str) for a in row.get("args", [])), where
    assert effective(row, doc, "mode") in ("min", "max"), where
    assert is_number(effective(row, doc, "scale")) and effective(row, doc, "scale") > 0, where
    metric = effective(row, doc, "metric")
    assert metric_known(metric, row["task"]), f"{where}: {row['task']} logs no metric {metric!r}"


@pytest.mark.parametrize("name, row", all_rows(), ids=lambda x: x if isinstance(x, str) else x.get("row"))
def test_row_config(name, row):
    where = f"{name}: {row['row']}"
    if row["config"] is None:
        if row["family"] not in FAMILIES:
            assert f"family pending: {row['family']}" in row["notes"], (
                f"{where}: OrthoLab has no family {row['family']!r}; say 'family pending: {row['family']}' in notes"
            )
        else:
            assert "family pending:" in row["notes"] or "no config" in row["notes"], (
                f"{where}: {row['family']} exists; link a config or say why there is 'no config' in notes"
            )
        return
    assert row["family"] in FAMILIES, f"{where}: a config for a family OrthoLab lacks"
    path = REPO / row["config"]
    assert row["config"].startswith("configs/papers/") and path.is_file(), f"{where}: {row['config']} does not exist"
    text = path.read_text()
    assert text.startswith("# ") and len(text.splitlines()[0]) > 20, f"{row['config']}: a header comment first"
    config = yaml.safe_load(text)
    assert config["model"]["family"] == row["family"], f"{where}: {row['config']} trains {config['model']['family']}"
    class_name = config["data"]["class_path"].rsplit(".", 1)[-1]
    data_path = str(config["data"].get("init_args", {}).get("path") or "")
    assert not data_path.startswith(".."), (
        f"{row['config']}: data.path {data_path!r} exists only beside a checkout; "
        "null (the data root) works from a wheel"
    )
    assert TASK_OF_CLASS.get(class_name) == row["task"], f"{where}: {row['config']} is task {class_name}"
    hidden = config["model"].get("hidden_size")
    if isinstance(hidden, int) and row["hidden_size"] is not None:
        assert hidden == row["hidden_size"], f"{where}: {row['config']} has hidden_size {hidden}"
    if hidden == "auto":
        assert row["hidden_size"] is None, f"{where}: {row['config']} sizes the model by its parameter budget"
        assert row["parameters"] in (None, config["model"].get("param_budget")), where


# ---------------------------------------------------------------------------------------------------------------
# the typed-in values against the paper texts
@cache
def paper_text(paper: str) -> str:
    path = PAPERS / f"{paper}.txt"
    if not PAPERS.is_dir():
        pytest.skip("needs ../shared/papers")
    assert path.is_file(), f"paper: {paper!r} names no file in {PAPERS}"
    return path.read_text()


def printed_forms(value: float) -> set[str]:
    """The ways a number can be printed that read back as exactly this value (0.92 as 0.920, 89.5 as 89.50)."""
    return {form for form in (f"{value:g}", f"{value:.1f}", f"{value:.2f}", f"{value:.3f}") if float(form) == value}


def on_table_line(row: dict, lines: list[str]) -> bool:
    """The value on one tab-separated table line that also holds the row's hidden size or printed model name, or
    marks the value itself (89.50%, 0.937*)."""
    name = re.search(r"printed as ([^;]+);", row["notes"])
    anchors = [rf"(?<![\d.]){row['hidden_size']}(?![\d])"] if row["hidden_size"] else []
    anchors += [re.escape(name.group(1).lower())] if name else []
    for line in lines:
        if "\t" not in line:
            continue
        for form in printed_forms(row["value"]):
            match = re.search(rf"(?<![\d.]){re.escape(form)}(?![\d])(%|\*|\^{{\*}})?", line)
            if match and (match.group(1) or any(re.search(anchor, line.lower()) for anchor in anchors)):
                return True
    return False


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_values_are_printed_in_the_paper(path):
    doc = load(path)
    numbered = [row for row in doc["rows"] if row["value"] is not None]
    if not numbered:  # outcomes only, no paper text (comparison_2026: its numbers stay in the papers' tables)
        return
    lines = paper_text(doc["paper"]).splitlines()
    for row in numbered:
        assert on_table_line(row, lines), f"{path.name}: {row['row']} = {row['value']} is not printed so"


def test_the_2026_comparison_sets_every_family_side_by_side():
    """LRU and S4D at both budgets on each task, and every other row a twin of a paper table's row (its runs), but
    for OrthoLab's own variants of a paper's row, whose outcome says they have no published value."""
    rows = load(PUBLISHED / "comparison_2026.yaml")["rows"]
    tasks = {row["row"].split("_")[0] for row in rows}
    assert tasks == {"copying-T1000", "copying-T2000", "adding-T750", "mnist", "pmnist"}
    for task in tasks:
        for family in ("lru", "s4d"):
            counts = sorted(
                row["parameters"] for row in rows if row["row"].startswith(task + "_") and row["family"] == family
            )
            assert len(counts) == 2 and abs(counts[0] / 16_000 - 1) < 0.05 and abs(counts[1] / 69_000 - 1) < 0.05, (
                f"{task}: {family} at the 16k and 69k budgets, got {counts}"
            )
        assert len({row["family"] for row in rows if row["row"].startswith(task + "_")}) >= 7, task
    tables = {path.stem: load_table(path) for path in FILES}
    for row in load_table(PUBLISHED / "comparison_2026.yaml").rows:
        if row.family not in ("lru", "s4d", "exprnn") and not (row.outcome or "").startswith("no published value"):
            assert twins(row, tables), f"{row.row}: no paper table runs {row.config} {row.args}"


def column_pairs():
    """(paper, left row, right row) for values printed side by side: Valid./Eval. MSE, MNIST/permuted MNIST."""
    pairs = []
    for val_path in PUBLISHED.glob("*_val.yaml"):
        test_path = val_path.with_name(val_path.name.replace("_val.yaml", "_test.yaml"))
        test_rows = {row["row"]: row for row in load(test_path)["rows"]}
        pairs += [
            (load(val_path)["paper"], row, test_rows[row["row"]])
            for row in load(val_path)["rows"]
            if row["row"] in test_rows
        ]
    for path in PUBLISHED.glob("*_table1.yaml"):
        rows = {row["row"]: row for row in load(path)["rows"]}
        pairs += [
            (load(path)["paper"], row, rows["p" + key])
            for key, row in rows.items()
            if key.startswith("mnist_") and "p" + key in rows
        ]
    return pairs


def test_side_by_side_columns_are_not_swapped():
    pairs = column_pairs()
    assert len(pairs) >= 40
    for paper, left, right in pairs:
        lines = [line for line in paper_text(paper).splitlines() if "\t" in line]
        found = False
        for line in lines:
            cells = line.split("\t")
            for i, cell in enumerate(cells[:-1]):
                if cell.strip() in printed_forms(left["value"]) and cells[i + 1].strip() in printed_forms(
                    right["value"]
                ):
                    found = found or str(left["hidden_size"]) in cells[:i]
        assert found, f"{paper}: {left['row']} = {left['value']} then {right['value']} is not a printed pair of cells"


@pytest.mark.parametrize(
    "name, row_id, printed",
    [
        ("scornn_table1.yaml", "pmnist_scornn_n512", "SCORNN\t512\t$pprox 137 \\mathrm{K}$\t0.985\t0.966"),
        ("scornn_table2_test.yaml", "timit_lstm_n84", "LSTM\t84\t$\\approx 83$ K\t15.42\t14.30"),
        ("scornn_table3.yaml", "mnist_fcurnn_n512", "Full uRNN\t512\t$pprox 270 { m k}$\t27.9"),
        ("scurnn_table2_test.yaml", "timit_scurnn_n258", "scuRNN\t258\t$\\approx 200k$\t1.84\t1.67"),
        ("srnn_table2.yaml", "bigpmnist_srnn_n1024", "Big pMNIST\t33.60%\t9.45%\tOOM\t11.01%\t90.31%"),
        ("srnn_table3.yaml", "timit_nru_n1024", "NRU\t1024 0.4"),
        ("srnn_table4.yaml", "nottingham_srnn_n2048", "SRNN\tOur run\t3.22"),
        ("srnn_table5.yaml", "copying-T300_urnn_n128", "uRNN\t13.48\t112.78\t1510.54\t76.10\t2k"),
    ],
)
def test_spot_checks_against_the_paper_lines(name, row_id, printed):
    doc = load(PUBLISHED / name)
    (row,) = [row for row in doc["rows"] if row["row"] == row_id]
    assert printed in paper_text(doc["paper"]), f"{printed!r} is not a line fragment of {doc['paper']}"
    numbers = [float(x) for x in re.findall(r"(?<![\w.])\d+\.\d+", printed)]
    assert row["value"] in numbers


def test_rows_shared_by_two_papers_agree_where_the_papers_do():
    """scoRNN's and scuRNN's Tables 1 print the same numbers for the models both list."""
    sco = {row["row"]: row["value"] for row in load(PUBLISHED / "scornn_table1.yaml")["rows"]}
    scu = {row["row"]: row["value"] for row in load(PUBLISHED / "scurnn_table1.yaml")["rows"]}
    shared = set(sco) & set(scu)
    assert len(shared) >= 14
    assert {key: sco[key] for key in shared} == {key: scu[key] for key in shared}


def test_no_row_reads_a_path_beside_the_checkout():
    """`reproduce` runs from any folder (reproducing.md): a row's flags name no relative path such as
    ../shared/data/poly_music, which resolved only from the checkout (the cpu_checks music rows until stop 71);
    data sets come from the data root."""
    from ortholab.db.published import load_tables

    relative = [
        f"{table.id}: {row.row}: {arg}"
        for table in load_tables().values()
        for row in table.rows
        for arg in row.args
        if re.match(r"\.{1,2}/", arg) or "/shared/" in arg
    ]
    assert relative == []
