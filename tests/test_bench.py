"""`ortholab bench --quick` runs (so the benchmark cannot rot); no timing is asserted."""
import json
import re

import pytest

import ortholab.training.bench as bench
from ortholab.models import FAMILIES
from ortholab.models.sizing import hidden_size_for_budget, parameter_count
from ortholab.training.bench import BUDGET_TOLERANCE, BUDGETS, CLASSES
from ortholab.training.cli import main


def test_quick_bench_reports_ratios_for_each_family(capsys):
    main(["bench", "--quick", "--json"])  # every registered family (the default)
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    rows = {r["family"]: r for r in report["rows"]}
    skipped = set(re.findall(r"skipping (\w+) at 16k: its nearest size", captured.err))
    assert set(rows) | skipped == set(FAMILIES) and not set(rows) & skipped and "torch" in report["machine"]
    for family in skipped:  # skipped only because no size comes near the budget (NRU's memory, the R-Transformer)
        count = parameter_count(family, hidden_size_for_budget(family, BUDGETS["16k"], 1, CLASSES), 1, CLASSES)
        assert abs(count - BUDGETS["16k"]) > BUDGET_TOLERANCE * BUDGETS["16k"], family
    assert abs(rows["scornn"]["parameters"] - 16_000) < 500 and rows["scornn"]["hidden_size"] == 170  # the paper's n at 16k
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
    main(["bench", "--families", "scornn", "--sizes", "16k", "--batches", "4", "--seq-len", "16", "--repeats", "1",
          "--memory", "", "--json"])
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["family"] == "scornn" and row["hidden_size"] == 170 and row["vs_lstm"] > 0 and row["vs_rnn_relu"] > 0


def test_a_family_whose_process_dies_is_named_and_the_other_rows_are_kept(capsys, monkeypatch):
    die = "import os, signal, sys\nif {}: os.kill(os.getpid(), signal.SIGKILL)\n"  # as the out-of-memory killer does
    monkeypatch.setattr(bench, "ISOLATED_SCRIPT", die.format("'scurnn' in sys.argv[1]") + bench.ISOLATED_SCRIPT)
    monkeypatch.setattr(bench, "PEAK_SCRIPT", die.format("sys.argv[4] == '16'") + bench.PEAK_SCRIPT)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--families", "scornn,scurnn", "--sizes", "16k", "--batches", "4", "--seq-len", "16",
              "--repeats", "1", "--memory", "8,16"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 1
    assert re.search(r"^\s*scornn .* \d+ / failed$", out, re.M)  # its peak at T = 8 measured, at T = 16 not
    assert "not measured: scurnn at batch 4 (16k): the measuring process died, killed by SIGKILL" in out
    assert "out-of-memory killer" in out
    assert "not measured: peak memory of scornn (n = 170) at batch 4, T = 16" in out
