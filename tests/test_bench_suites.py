"""`ortholab bench --suite NAME` in its quickest form: the output's structure (every ratio present, finite and
positive), never its timings; and what a suite compares is the same computation both ways."""

import json
import math

import pytest
import torch
from tolerances import close, norm, roundoff

from ortholab.bench.suites import SUITES
from ortholab.bench.suites.complex_dtype_recurrence import ComplexDtypeScuRNN
from ortholab.bench.suites.ornn_variants import shapes, step_maps
from ortholab.cli.main import main
from ortholab.errors import ConfigError
from ortholab.models.scurnn import ScuRNN

# the ratios each suite prints at its quick settings (settings.QUICK)
EXPECTED_RATIOS = {
    "scurnn-complex": ["scurnn [Re | Im] layout / scurnn complex dtypes"],
    "ornn-srnn": ["ornn / nn.RNN(relu)", "ornn / nn.LSTM", "srnn / nn.RNN(relu)", "srnn / nn.LSTM"],
    "ornn-variants": [
        "forming W, compact WY / one reflection at a time (n=16, m=4)",
        "16 steps, WY factors / dense W (n=16, m=4)",
        "forming W, compact WY / one reflection at a time (n=16, m=16)",
    ],
    "callbacks": ["training with callbacks / training without callbacks"],
    "runs-listing": ["listing (runs_rows) / the 1 s target", "listing (runs_rows) / summary query (Store.list_runs)"],
    "music-eval": ["file order / by length", "one piece at a time / by length"],
    "lru-modes": [
        "convolution / scan (H=4; auto: convolution)",
        "LRU unit, H=4 (convolution) / scoRNN model, n=8",
        "convolution / scan (H=40; auto: scan)",
        "LRU unit, H=40 (scan) / scoRNN model, n=8",
    ],
    "numba-pool": [
        "pools of every core / pools of one",
        "own pool of every core, the other's of one / pools of one",
        "own pool of one, the other's of every core / pools of one",
    ],
}


def run_suite(capsys, *argv: str) -> dict:
    main(["bench", *argv, "--json"])
    return json.loads(capsys.readouterr().out)


def assert_ratios(report: dict, expected: list[str]) -> None:
    assert list(report["ratios"]) == expected
    assert all(math.isfinite(v) and v > 0 for v in report["ratios"].values()), report["ratios"]
    assert report["seconds"] and all(math.isfinite(v) and v > 0 for v in report["seconds"].values())
    assert "torch" in report["machine"]


def test_every_suite_has_its_expected_ratios():
    assert set(EXPECTED_RATIOS) == set(SUITES)


@pytest.mark.parametrize(
    "suite",
    [
        # numba-pool starts a process pair per pairing of pools, each compiling numba's kernels: ~30 s even quick
        pytest.param(name, marks=pytest.mark.slow) if name == "numba-pool" else name
        for name in sorted(EXPECTED_RATIOS)
    ],
)
def test_a_suite_in_its_quickest_form_prints_its_ratios(suite, capsys):
    report = run_suite(capsys, "--suite", suite, "--quick")
    assert report["suite"] == suite and report["settings"]["repeats"] == 1
    assert_ratios(report, EXPECTED_RATIOS[suite])


def test_the_text_form_prints_each_ratio(capsys):
    main(["bench", "--suite", "scurnn-complex", "--quick"])
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.strip().startswith("ratio ")]
    assert float(line.rsplit(": ", 1)[1]) > 0 and "hidden 8, batch 4, seq_len 16" in out


def test_flags_and_params_set_a_suites_settings(capsys):
    report = run_suite(capsys, "--suite", "ornn-variants", "--quick", "--seq-len", "8", "--param", "shapes=12x3")
    assert report["settings"]["seq_len"] == 8 and report["settings"]["shapes"] == "12x3"
    assert_ratios(
        report,
        ["forming W, compact WY / one reflection at a time (n=12, m=3)", "8 steps, WY factors / dense W (n=12, m=3)"],
    )


@pytest.mark.slow
def test_runs_listing_times_a_whole_ortholab_runs_process(capsys):
    report = run_suite(capsys, "--suite", "runs-listing", "--quick", "--param", "process=1")
    assert_ratios(report, [*EXPECTED_RATIOS["runs-listing"], "listing (runs_rows) / whole `ortholab runs` process"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--suite", "callbacks", "--memory", "784"],
            "--memory is the main table's (--suite families), not --suite callbacks's",
        ),
        (
            ["--suite", "scurnn-complex", "--sizes", "16k"],
            "--sizes does not apply to --suite scurnn-complex; it takes "
            "--batches, --seq-len, --repeats, --device; --param hidden=116",
        ),
        (["--suite", "ornn-srnn", "--batches", "50,128"], "--batches 50,128: --suite ornn-srnn takes one value here"),
        (["--suite", "callbacks", "--param", "nope=1"], "--param 'nope=1': --suite callbacks takes --families"),
        (
            ["--suite", "callbacks", "--param", "steps=ten"],
            "--param steps=ten: --suite callbacks takes one positive integer here",
        ),
        (["--suite", "callbacks", "--quick", "--param", "callbacks=drift,nope"], "--param callbacks: unknown ['nope']"),
        (
            ["--suite", "ornn-variants", "--param", "shapes=4x8"],
            "--param shapes=4x8: give n x m pairs with 1 <= m <= n",
        ),
        (["--suite", "ornn-srnn", "--sizes", "1k"], "--sizes 1k: choose one of ['16k', '69k']"),
        (["--param", "hidden=8", "--quick"], "--param hidden=8: the main table takes no --param"),
    ],
)
def test_bad_suite_input_is_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *argv])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_the_complex_dtype_scurnn_computes_what_the_layer_computes():
    # the suite times two implementations of one recurrence: outputs and every parameter's gradient agree
    torch.manual_seed(0)
    seq_len, n = 11, 7
    layer = ScuRNN(3, n).double()
    with torch.no_grad():  # a generic A (nonzero imaginary part), so the complex arithmetic is exercised
        layer.cayley.imag_upper.normal_(0, 0.3)
        layer.bias.uniform_(-0.5, 0.1)
    x, probe = torch.randn(4, seq_len, 3, dtype=torch.float64), torch.randn(4, seq_len, 2 * n, dtype=torch.float64)
    outputs, grads = [], []
    for model in (layer, ComplexDtypeScuRNN(layer)):
        layer.zero_grad()
        out = model(x)
        (out * probe).sum().backward()
        outputs.append(out.detach())
        grads.append({name: p.grad.clone() for name, p in layer.named_parameters()})
    # round-off of n-term products over T steps through a unitary W (no growth), relative to the sizes compared
    torch.testing.assert_close(outputs[1], outputs[0], **close(torch.float64, n * seq_len, scale=norm(outputs[0])))
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, **close(torch.float64, n * seq_len, scale=norm(grad)))


def test_the_two_ways_of_applying_the_ornns_w_agree():
    u = torch.randn(12, 3, dtype=torch.float64)  # n = 12, m = 3 reflections
    maps = step_maps(u)
    h = torch.randn(5, 12, dtype=torch.float64)
    dense, factored = maps["dense W per step"](h), maps["WY factors per step"](h)
    torch.testing.assert_close(factored, dense, **close(torch.float64, 12, scale=norm(dense)))  # n-term products
    assert shapes("128x16,170x170") == [(128, 16), (170, 170)]


def test_music_eval_batchings_give_the_same_nll(capsys):
    import re

    report = run_suite(capsys, "--suite", "music-eval", "--quick")
    (note,) = [n for n in report["notes"] if "NLL per step" in n]
    values = [float(v) for v in re.findall(r"(?:file order|by length|one piece) (\d+\.\d+)", note)]
    assert len(values) == 3
    # float32 (printed with 9 digits, exactly): an LSTM (n = 8) over at most 39 steps of 88 inputs, 88 keys summed,
    # a mean over ~250 valid steps, batched differently (the BLAS sums in another order)
    bound = roundoff(torch.float32, 39 * (88 + 8) + 88 + 250, scale=values[1])
    assert max(values) - min(values) <= bound, values


def test_the_lru_modes_suite_times_one_unit_two_ways():
    """Its convolution and scan units share every parameter and give the same y (float64: round-off apart)."""
    from ortholab.bench.suites.lru_modes import _Unit, widths
    from ortholab.models.lru import LinearRecurrentUnit

    torch.manual_seed(0)
    convolution = LinearRecurrentUnit(5, 8, 0.0, 1.0, 6.28, mode="convolution").double()
    scan = LinearRecurrentUnit(5, 8, 0.0, 1.0, 6.28, mode="recurrence").double()
    scan.load_state_dict(convolution.state_dict())
    u = torch.randn(3, 17, 5, dtype=torch.float64)
    expected = _Unit(scan)(u)
    # two float64 orders of the same sums over 17 steps and 8 states (FFT of length 34 against the scan)
    torch.testing.assert_close(_Unit(convolution)(u), expected, **close(torch.float64, n=4 * 17, scale=norm(expected)))
    assert widths("27,95") == [27, 95]
    with pytest.raises(ConfigError, match="widths=0"):
        widths("0")
