"""`ortholab bench --quick` runs (so the benchmark cannot rot); no timing is asserted."""

import json
import math
import re

import pytest
import torch
from devices import needs_cuda

import ortholab.bench.families as bench
from ortholab.bench.families import BUDGET_TOLERANCE, BUDGETS, CLASSES
from ortholab.cli.main import main
from ortholab.models import FAMILIES, ConfigError
from ortholab.models.sizing import hidden_size_for_budget, parameter_count


def test_quick_bench_reports_ratios_for_each_family(capsys):
    main(["bench", "--quick", "--json"])  # every registered family (the default)
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    rows = {r["family"]: r for r in report["rows"]}
    skipped = set(re.findall(r"skipping (\w+) at 16k: ", captured.err))
    assert set(rows) | skipped == set(FAMILIES) and not set(rows) & skipped and "torch" in report["machine"]
    for family in skipped:  # skipped only because no size comes near the budget (NRU's memory, the R-Transformer)
        try:
            n = hidden_size_for_budget(family, BUDGETS["16k"], 1, CLASSES)
        except ConfigError as err:  # even hidden size 1 is over the budget
            assert "is below the smallest" in str(err), family
            continue
        count = parameter_count(family, n, 1, CLASSES)
        assert abs(count - BUDGETS["16k"]) > BUDGET_TOLERANCE * BUDGETS["16k"], family
    assert (
        abs(rows["scornn"]["parameters"] - 16_000) < 500 and rows["scornn"]["hidden_size"] == 170
    )  # the paper's n at 16k
    assert rows["lstm"]["vs_lstm"] == 1.0
    assert all(r["fwd_bwd_ms"] > 0 and r["step_ms"] > 0 and r["vs_rnn_relu"] > 0 for r in rows.values())
    for family, row in rows.items():  # formation is part of a step: timed for the families that form W
        if FAMILIES[family](1, row["hidden_size"]).forms_recurrent_matrix:
            assert row["formation_share"] > 0 and row["formation_ms"] > 0, family  # no timing bound: noise
        else:
            assert row["formation_share"] is None and row["formation_ms"] is None, family


def test_bench_names_an_unknown_family(capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--quick", "--families", "scornn,nope"])
    assert exit_info.value.code == 2 and "'nope' is not registered" in capsys.readouterr().err


def test_the_full_bench_measures_each_family_in_its_own_process(capsys):
    main(
        [
            "bench",
            "--families",
            "scornn",
            "--sizes",
            "16k",
            "--batches",
            "4",
            "--seq-len",
            "16",
            "--repeats",
            "1",
            "--memory",
            "",
            "--json",
        ]
    )
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["family"] == "scornn" and row["hidden_size"] == 170 and row["vs_lstm"] > 0 and row["vs_rnn_relu"] > 0


def test_a_family_whose_process_dies_is_named_and_the_other_rows_are_kept(capsys, monkeypatch):
    die = "import os, signal, sys\nif {}: os.kill(os.getpid(), signal.SIGKILL)\n"  # as the out-of-memory killer does
    monkeypatch.setattr(bench, "ISOLATED_SCRIPT", die.format("'scurnn' in sys.argv[1]") + bench.ISOLATED_SCRIPT)
    monkeypatch.setattr(bench, "PEAK_SCRIPT", die.format("sys.argv[4] == '16'") + bench.PEAK_SCRIPT)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "bench",
                "--families",
                "scornn,scurnn",
                "--sizes",
                "16k",
                "--batches",
                "4",
                "--seq-len",
                "16",
                "--repeats",
                "1",
                "--memory",
                "8,16",
            ]
        )
    out = capsys.readouterr().out
    assert exit_info.value.code == 1
    assert re.search(r"^\s*scornn .* \d+ / failed$", out, re.M)  # its peak at T = 8 measured, at T = 16 not
    assert "not measured: scurnn at batch 4 (16k): the measuring process died, killed by SIGKILL" in out
    assert "out-of-memory killer" in out
    assert "not measured: peak memory of scornn (n = 170) at batch 4, T = 16" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal is for machines without")
def test_bench_on_cuda_without_cuda_says_so_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--quick", "--device", "cuda"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert "--device cuda: CUDA is not available on this machine" in err and "--device cpu" in err


def _epoch_column(out: str, family: str) -> str:
    head, *lines = [line for line in out.splitlines() if "family" in line or line.strip().startswith(family)]
    cells = [re.split(r"\s{2,}", line.strip()) for line in (head, *lines)]
    return cells[1][cells[0].index("pMNIST epoch")]


def test_the_table_estimates_a_pmnist_epoch_from_the_step_time_at_t_784(capsys, monkeypatch):
    assert bench.pmnist_epoch_seconds(50, 784, 20.0) == 1100 * 0.02  # the paper's batch 50: 1,100 steps of 20 ms
    assert bench.pmnist_epoch_seconds(50, 783, 20.0) is None  # another length: no estimate
    main(["bench", "--quick", "--families", "scornn"])  # T = 32
    assert _epoch_column(capsys.readouterr().out, "scornn") == "-"
    # the estimate from the measured step, at a length taken for MNIST's here so that the check stays fast
    # (--in-process, as --quick: the patched length holds in this process only)
    monkeypatch.setattr(bench, "PMNIST_LENGTH", 16)
    main(
        [
            "bench",
            "--families",
            "scornn",
            "--sizes",
            "16k",
            "--batches",
            "4",
            "--seq-len",
            "16",
            "--repeats",
            "1",
            "--memory",
            "",
            "--in-process",
            "--json",
        ]
    )
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["pmnist_epoch_s"] == math.ceil(55_000 / 4) * row["step_ms"] / 1000
    rendered = bench.table([bench.Row(**row)])
    assert _epoch_column(rendered, "scornn") == f"{row['pmnist_epoch_s']:.0f} s"


@needs_cuda
def test_bench_on_cuda_prints_the_same_table_with_the_epoch_estimate(capsys):
    main(
        [
            "bench",
            "--device",
            "cuda",
            "--families",
            "scornn",
            "--sizes",
            "16k",
            "--batches",
            "50",
            "--seq-len",
            "784",
            "--repeats",
            "2",
            "--memory",
            "784",
        ]
    )
    out = capsys.readouterr().out
    assert torch.cuda.get_device_name() in out
    epoch = _epoch_column(out, "scornn")
    assert epoch.endswith(" s") and float(epoch[:-2]) > 0
    (row,) = [line for line in out.splitlines() if line.strip().startswith("scornn")]
    assert "170*" in row and row.split()[-1] != "failed"  # the CUDA peak measured in its own process


def test_ratios_pair_each_repetition_with_its_reference():
    """A load that triples in the second repetition: each repetition's ratio is 0.5 but for one outlier, so the
    paired median is 0.5; the ratio of the two medians (3 / 2) would pair a quiet moment with a busy one."""
    assert bench.paired_ratio([1.0, 10.0, 3.0], [2.0, 20.0, 2.0]) == 0.5
    with pytest.raises(ValueError):  # every repetition times both: lists of different lengths are a bug
        bench.paired_ratio([1.0, 2.0], [1.0])


def test_flags_given_with_quick_win_over_its_settings(capsys):
    with pytest.raises(SystemExit) as exit_info:  # --quick used to replace --sizes, so a typo went unseen
        main(["bench", "--quick", "--families", "scornn", "--sizes", "16kk"])
    assert exit_info.value.code == 2 and "--sizes" in capsys.readouterr().err
    main(["bench", "--quick", "--families", "scornn", "--batches", "3", "--json"])
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["batch"] == 3 and row["seq_len"] == 32  # the batch given; --quick's length where none was
