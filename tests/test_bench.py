"""`ortholab bench --quick` runs (so the benchmark cannot rot); no timing is asserted."""
import json

from training.cli import main


def test_quick_bench_reports_ratios_for_each_family(capsys):
    main(["bench", "--quick", "--json", "--families", "scornn,lstm,rnn"])
    report = json.loads(capsys.readouterr().out)
    rows = {r["family"]: r for r in report["rows"]}
    assert set(rows) == {"scornn", "lstm", "rnn"} and "torch" in report["machine"]
    assert abs(rows["scornn"]["parameters"] - 16_000) < 500 and rows["scornn"]["hidden_size"] == 170  # the paper's n at 16k
    assert rows["lstm"]["vs_lstm"] == 1.0
    assert all(r["fwd_bwd_ms"] > 0 and r["step_ms"] > 0 and r["vs_rnn_relu"] > 0 for r in rows.values())


def test_bench_names_an_unknown_family(capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--quick", "--families", "scornn,nope"])
    assert exit_info.value.code == 2 and "'nope' is not registered" in capsys.readouterr().err
