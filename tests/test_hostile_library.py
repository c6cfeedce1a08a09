"""Hostile input to the library and the Runs page's filter (issue 47): `ortholab.nn`'s layers, `ortholab.db.frames`
and `training.api.fit` refuse what they cannot use in one line naming the argument (as torch.nn.RNN does), and the
filter expression refuses what is too long or nested too deep at once, with its other errors' one line."""

import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from ortholab import nn as onn
from ortholab.app.filter_expr import FilterError, evaluate, parse, tokenize
from ortholab.db import Store, StoreError, frames
from ortholab.training.api import fit

DEMO = str(Path(__file__).resolve().parents[1] / "configs" / "demo" / "copying_scornn.yaml")
QUICK = 0.5  # seconds: a guard against the 46 s of the backtracking tokenizer, not a benchmark
MAX_DEPTH = 50  # the filter's bound on nested brackets and nots (docs/dashboard.md)


def one_line(error: BaseException) -> str:
    assert "\n" not in str(error)
    return str(error)


# ---- the layers' arguments -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "layer, args, error, message",
    [
        (onn.ScoRNN, (3, 16.5), TypeError, "ScoRNN: hidden_size should be of type int, got 16.5 (float)"),
        (onn.LSTM, (3, "16"), TypeError, "LSTM: hidden_size should be of type int, got '16' (str)"),
        (onn.ScoRNN, (3, True), TypeError, "ScoRNN: hidden_size should be of type int, got True (bool)"),
        (onn.ScoRNN, ("3", 16), TypeError, "ScoRNN: input_size should be of type int, got '3' (str)"),
        (onn.LSTM, (3, 16, 1.5), TypeError, "LSTM: num_layers should be of type int, got 1.5 (float)"),
        (onn.ScoRNN, (3, 0), ValueError, "ScoRNN: hidden_size must be greater than zero, got 0"),
        (onn.ScoRNN, (-1, 16), ValueError, "ScoRNN: input_size must be greater than zero, got -1"),
        (onn.LSTM, (3, 16, 0), ValueError, "LSTM: num_layers must be greater than zero, got 0"),
    ],
)
def test_a_layer_names_the_size_it_cannot_use(layer, args, error, message):
    with pytest.raises(error) as raised:
        layer(*args)
    assert one_line(raised.value) == message


def test_a_layer_takes_numpy_ints_as_sizes():
    layer = onn.ScoRNN(np.int64(3), np.int64(8), num_layers=np.int64(2))
    assert (layer.input_size, layer.hidden_size, layer.num_layers) == (3, 8, 2)
    assert type(layer.hidden_size) is int


# ---- the layers' input and h0 ------------------------------------------------------------------------------------
def _state(layer, batch, dtype=torch.float32, device="cpu"):
    """A zero h0 in the layer's format whose first part (h) has `dtype` and `device`, the others float32."""
    parts = [
        torch.zeros(
            layer.num_layers, batch, size, dtype=dtype if k == 0 else torch.float32, device=device if k == 0 else "cpu"
        )
        for k, size in enumerate(layer.state_size.values())
    ]
    return parts[0] if len(parts) == 1 else tuple(parts)


FAMILIES = ["scornn", "scurnn", "lstm"]  # a real state, a complex one in 2n features, a pair (h, c)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_an_input_of_another_dtype_is_named(family, dtype):
    layer = onn.LAYERS[family](3, 4)
    with pytest.raises(ValueError) as raised:
        layer(torch.randn(5, 2, 3).to(dtype))
    assert one_line(raised.value).endswith(f": input must have the type torch.float32, got type {dtype}")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.complex64])
def test_an_h0_of_another_dtype_or_kind_is_named(family, dtype):
    layer = onn.LAYERS[family](3, 4)
    with pytest.raises(ValueError) as raised:
        layer(torch.randn(5, 2, 3), _state(layer, 2, dtype))
    h0 = "h0's h" if family == "lstm" else "h0"
    assert one_line(raised.value).endswith(f": {h0} must have the type torch.float32, got type {dtype}")


def test_an_input_or_h0_on_another_device_is_named():
    layer = onn.ScoRNN(3, 4)
    with pytest.raises(ValueError, match="ScoRNN: input is on meta but the layer's parameters are on cpu"):
        layer(torch.randn(5, 2, 3, device="meta"))
    with pytest.raises(ValueError, match="ScoRNN: h0 is on meta but the layer's parameters are on cpu"):
        layer(torch.randn(5, 2, 3), _state(layer, 2, device="meta"))


def test_a_float64_layer_takes_float64_and_refuses_float32():
    layer = onn.ScoRNN(3, 4, dtype=torch.float64)
    output, h_n = layer(torch.randn(5, 2, 3, dtype=torch.float64), _state(layer, 2, torch.float64))
    assert output.dtype == h_n.dtype == torch.float64
    with pytest.raises(ValueError, match="input must have the type torch.float64, got type torch.float32"):
        layer(torch.randn(5, 2, 3))


@pytest.mark.parametrize(
    "layer, options, said",
    [
        ("ScoRNN", {"batch_first": "yes"}, "ScoRNN: batch_first must be True or False, got 'yes'"),  # taken as True
        ("ScoRNN", {"dtype": "float64"}, "ScoRNN: dtype must be a torch floating dtype such as torch.float64"),
        ("ScoRNN", {"dtype": torch.int64}, "dtype must be a torch floating dtype"),
        ("LSTM", {"forget_bias": "1"}, "forget_bias of family 'lstm' must be float (default 1.0), got '1' (str)"),
        ("EURNN", {"capacity": 2.5}, "capacity of family 'eurnn' must be int (default 2), got 2.5"),
        ("EURNN", {"capacity": True}, "capacity of family 'eurnn' must be int (default 2), got True"),
        ("ScoRNN", {"dropout": "0.1"}, "ScoRNN: dropout should be a number in [0, 1), got '0.1'"),  # config words
    ],
)
def test_a_layer_argument_of_another_type_is_a_type_error_naming_it(layer, options, said):
    """These reached torch's own errors (fill_() received an invalid combination of arguments), or were taken."""
    with pytest.raises(TypeError, match=re.escape(said)):
        getattr(onn, layer)(3, 16, **options)
    assert onn.LSTM(3, 4, forget_bias=1).hidden_size == 4 and onn.LSTM(3, 4, forget_bias=None).hidden_size == 4


def test_group_optimizer_names_a_model_or_specs_of_another_type():
    """group_optimizer(m, None) read None as a config's name; group_optimizer("model", ...) an AttributeError."""
    layer = onn.ScoRNN(3, 4)
    for specs in (None, ["adam"]):
        with pytest.raises(TypeError, match="specs must be a dict of group -> optimizer"):
            onn.group_optimizer(layer, specs)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got 'model'"):
        onn.group_optimizer("model", {"default": {"name": "adam", "lr": 1e-3}})
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module, got \[1\]"):
        onn.parameter_groups([1])


@pytest.mark.parametrize("family", ["urnn", "eurnn", "scurnn", "fcurnn"])
def test_as_complex_refuses_features_of_another_size_naming_the_2n_it_reads(family):
    """The EURNN's and the uRNN's as_complex read n features (a real family's output, one half) as n/2 states
    without a word; the planar ones ended in torch's 'size of tensor a (8) must match ... b (0)'."""
    layer = onn.LAYERS[family](3, 8)
    for features in (torch.zeros(2, 8), torch.zeros(2, 17), torch.zeros(2, 16, dtype=torch.long)):
        with pytest.raises(ValueError, match=re.escape("features must be real (..., 16)")) as refused:
            layer.as_complex(features)
        one_line(refused.value)
    with pytest.raises(TypeError, match="features must be a tensor, got list"):
        layer.as_complex([0.0] * 16)
    assert layer.as_complex(torch.zeros(5, 16, dtype=torch.float64)).dtype == torch.complex128


@pytest.mark.parametrize("family", ["lru", "s4d"])
def test_as_complex_of_lru_and_s4d_says_where_their_complex_state_is(family):
    """It said 'has a real state', while the page and the layer's h_n hold LRU's and S4D's complex state x."""
    layer = onn.LAYERS[family](3, 8)
    _, h_n = layer(torch.randn(5, 3))
    with pytest.raises(ValueError, match=re.escape("its h_n holds the complex state x as [Re x | Im x]")):
        layer.as_complex(h_n)


def test_paper_optimizers_names_a_config_of_another_type_or_a_file_that_is_no_config(tmp_path):
    """paper_optimizers(3) looked for a config named '3'; a list, a binary file or a YAML mistake reached yaml's or
    dict's own errors (AttributeError: 'list' object has no attribute 'get'), or its multi-line ParserError."""
    with pytest.raises(TypeError, match=r"config must be a config's path or name, got 3 \(int\)"):
        onn.paper_optimizers(3)
    with pytest.raises(TypeError, match="config must be a config's path or name"):
        onn.paper_optimizers(None)
    for text, said in (
        ("- a\n- b\n", "holds no mapping `model:`"),
        ("model: 3\n", "holds no mapping `model:`"),
        ("a: [\n", "is no YAML file (ParserError)"),
        (b"\xd0\xff", "is no YAML file (UnicodeDecodeError)"),
    ):
        path = tmp_path / "config.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(ValueError, match=re.escape(said)) as refused:
            onn.paper_optimizers(path)
        one_line(refused.value)


@pytest.mark.parametrize("family", FAMILIES)
def test_autocast_still_feeds_low_precision_inputs_and_states(family):
    """Under torch.autocast a layer before this one hands it bfloat16: the cells cast it themselves (precision.py).
    The LSTM's h0 stays float32: oneDNN has no bfloat16 LSTM state on most CPUs (models/gated.py)."""
    layer = onn.LAYERS[family](3, 4, batch_first=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h0 = _state(layer, 2, torch.float32 if family == "lstm" else torch.bfloat16)
        output, _ = layer(torch.randn(2, 5, 3, dtype=torch.bfloat16), h0)
    output.float().sum().backward()  # outside autocast, as Lightning's mixed precision runs it
    assert torch.isfinite(output.float()).all()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("shape, batch_first", [((0, 2, 3), False), ((2, 0, 3), True), ((0, 3), False)])
def test_a_sequence_of_no_steps_is_refused_with_its_shape(family, shape, batch_first):
    layer = onn.LAYERS[family](3, 4, batch_first=batch_first)
    with pytest.raises(ValueError) as raised:
        layer(torch.randn(*shape))
    assert f"input must have at least one time step; got shape {shape}" in one_line(raised.value)


def test_input_and_h0_that_are_not_tensors_are_named():
    layer = onn.LSTM(3, 4)
    with pytest.raises(TypeError, match="LSTM: input must be a tensor, got list"):
        layer([[0.0, 1.0, 2.0]])
    with pytest.raises(TypeError, match="LSTM: h0's c must be a tensor, got list"):
        layer(torch.randn(5, 2, 3), (torch.zeros(1, 2, 4), [[0.0] * 4] * 2))


# ---- frames --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def twelve_runs(tmp_path_factory):
    """A store of runs 1..12, each with one metric point (its id) and one artifact."""
    db = f"sqlite:///{tmp_path_factory.mktemp('frames') / 'store.db'}"
    store = Store(db)
    for k in range(1, 13):
        run = store.create_run(name=f"run{k}", family="scornn", task="copying")
        assert run == k
        store.log_metrics(run, {"val/loss": float(k)}, step=1)
        store.add_artifact(run, "eigenvalues", "W", step=1, data=b"x", meta={})
        store.set_status(run, "finished")
    store.close()
    return db


@pytest.mark.parametrize(
    "read",
    [
        lambda db: frames.metrics(999, db=db),
        lambda db: frames.metrics([12, 999], db=db),
        lambda db: frames.artifacts(999, db=db),
    ],
    ids=["metrics", "metrics-list", "artifacts"],
)
def test_a_run_that_is_not_in_the_store_is_named(twelve_runs, read):
    with pytest.raises(StoreError) as raised:  # and a ValueError naming the argument, as load_run's
        read(twelve_runs)
    assert isinstance(raised.value, ValueError)
    assert re.match(r"run_ids?: No run with id 999 in sqlite:///", one_line(raised.value)), one_line(raised.value)
    assert f"`ortholab runs --db '{twelve_runs}'` lists its runs." in one_line(raised.value)  # this store's runs


@pytest.mark.parametrize(
    "read, message",
    [
        (frames.metrics, "run_ids must be a run id (int) or a list of them, got '12' (str)"),
        (frames.artifacts, "run_id must be a run id (int), got '12' (str)"),
    ],
)
def test_a_run_id_as_text_is_refused_not_read_digit_by_digit(twelve_runs, read, message):
    with pytest.raises(TypeError) as raised:
        read("12", db=twelve_runs)
    assert one_line(raised.value) == message


def test_run_ids_from_a_runs_frame_are_read(twelve_runs):
    ids = frames.runs(twelve_runs)["id"]  # numpy int64s
    long = frames.metrics(ids, "val/loss", db=twelve_runs)
    assert sorted(long["run"]) == list(range(1, 13)) and (long["value"] == long["run"]).all()
    assert frames.metrics(ids.iloc[0], db=twelve_runs)["run"].tolist() == [12]
    assert len(frames.artifacts(ids.iloc[0], db=twelve_runs)) == 1


# ---- fit -----------------------------------------------------------------------------------------------------
def test_fit_refuses_overrides_given_as_one_string():
    with pytest.raises(TypeError) as raised:
        fit(DEMO, "model.hidden_size=3")
    assert one_line(raised.value).startswith("overrides must be a dict of dotted keys to values")
    assert str(raised.value).endswith("got 'model.hidden_size=3' (str)")


def test_fit_names_a_value_yaml_cannot_write():
    with pytest.raises(
        TypeError,
        match=r"^overrides\['model.hidden_size'\] holds <object object at .*\(object\), "
        r"which YAML cannot write",
    ):
        fit(DEMO, {"model.hidden_size": object()})
    with pytest.raises(TypeError, match=r"^config holds <object object at .*\(object\), which YAML cannot write"):
        fit({"model": {"hidden_size": object()}})


# ---- the Runs page's filter expression ------------------------------------------------------------------------
def refused(text: str, call=parse) -> str:
    """The filter's one-line message for `text`, checked to come well under a second."""
    start = time.perf_counter()
    with pytest.raises(FilterError) as raised:
        call(text)
    took = time.perf_counter() - start
    assert took < QUICK, f"{took:.2f} s"
    return one_line(raised.value)


@pytest.mark.parametrize(
    "text, message",
    [
        ("(" * 3000 + "rho > 1" + ")" * 3000, "the expression is 6,007 characters long; at most 2,000 are read"),
        ("not " * 3000 + "rho > 1", "the expression is 12,007 characters long; at most 2,000 are read"),
        ("1" * 40_000 + "x", "the expression is 40,001 characters long; at most 2,000 are read"),
        ("(" * 400 + "rho > 1" + ")" * 400, "at column 51: brackets and 'not's nest more than 50 deep"),
        ("not " * 60 + "rho > 1", "at column 201: brackets and 'not's nest more than 50 deep"),
        ("not (" * 30 + "rho > 1" + ")" * 30, "at column 126: brackets and 'not's nest more than 50 deep"),
        ("1" * 1999 + "x", "at column 1: cannot read '111111111111'"),
    ],
    ids=["3000-brackets", "3000-nots", "40kB-digits", "400-brackets", "60-nots", "mixed", "2kB-digits"],
)
def test_a_hostile_filter_is_refused_quickly_in_one_line(text, message):
    assert message in refused(text)


def test_the_tokenizer_is_linear_in_a_run_of_digits():
    """The number token matched a run of n digits in O(n^2) ways before failing: 46 s for 40 kB."""
    assert "at column 1: cannot read '111111111111'" in refused("1" * 10_000 + "x", tokenize)


def test_filters_nested_up_to_the_bound_still_apply():
    frame = pd.DataFrame({"id": [1, 2], "steps": [10, 300]})
    known = list(frame.columns)
    for text, ids in (
        ("(" * MAX_DEPTH + "steps > 100" + ")" * MAX_DEPTH, [2]),
        ("not " * MAX_DEPTH + "steps > 100", [2]),  # an even number of nots
        ("not (" * (MAX_DEPTH // 2) + "steps > 100" + ")" * (MAX_DEPTH // 2), [1]),
    ):  # 25: odd
        mask = evaluate(parse(text), frame, known, lambda name: frame[name].astype(object))
        assert frame.loc[mask, "id"].tolist() == ids


def test_the_runs_page_says_what_it_refused(tmp_path, monkeypatch):
    """The `where` box (and ?where=): the page shows the refusal as it shows the filter's other mistakes."""
    from dashboard_store import open_page, rerun

    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    run = store.create_run(name="kept", family="scornn", task="copying")
    store.log_metrics(run, {"val/loss": 1.0}, step=1)
    at = open_page(store, monkeypatch, "runs")
    for text, message in (
        ("(" * 400 + "steps > 1" + ")" * 400, "nest more than 50 deep"),
        ("1" * 40_000 + "x", "at most 2,000 are read"),
    ):
        at.text_input(key="where").set_value(text)
        rerun(at)
        errors = [e.value for e in at.error]
        assert any(e.startswith("Filter expression not applied: ") and message in e for e in errors), errors
        assert at.dataframe[0].value["name"].tolist() == ["kept"]  # the table stays unfiltered by it
    store.close()


@pytest.mark.parametrize(
    "make, error, said",
    [
        (lambda: onn.ScoRNN(3, 4, num_layers=2, dropout=1.5), ValueError, "ScoRNN: dropout must be in [0, 1)"),
        (lambda: onn.ScoRNN(3, 4, dtype=torch.bfloat16), ValueError, "run the model under torch.autocast"),  # lu_cpu
        (lambda: onn.URNN(3, 4, dtype=torch.float16), ValueError, "would hold the parameters in 16 bits"),
        (lambda: onn.ScoRNN(3, 4, input_init_range=-1.0), ValueError, "input_init_range = -1.0 must be a finite"),
        (lambda: onn.ScoRNN(3, 4, input_init_range=float("nan")), ValueError, "input_init_range = nan must be"),
        (lambda: onn.ScoRNN(3, 4)(torch.ones(5, 2, 3, dtype=torch.long)), TypeError, "a floating-point tensor"),
        (lambda: onn.LSTM(3, 4, nope=1), ValueError, "(models/gated.py explains each)"),  # no models/lstm.py
    ],
)
def test_arguments_the_layers_once_passed_to_torch_are_refused_naming_them(make, error, said):
    """These reached torch's own errors ("lu_cpu" not implemented for 'Half', uniform_ expects ...), named the
    feature count for an integer input, or pointed at a file that does not exist."""
    with pytest.raises(error, match=re.escape(said)):
        make()
