"""Stacking: `model.num_layers` layers of any family with `model.dropout` between them."""

import pytest
import torch
from tolerances import cond, roundoff

from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.sizing import hidden_size_for_budget, parameter_count
from ortholab.models.stack import StackedLayers, build_layers
from ortholab.training.module import RecurrentModule

COPYING = {
    "name": "copying",
    "input_size": 10,
    "output_size": 9,
    "readout": "every_step",
    "loss": "cross_entropy",
    "main_metric": "val/loss",
    "main_metric_mode": "min",
    "symbolic": True,
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_stacks_and_groups_hold_each_parameter_once(family):
    torch.manual_seed(0)
    stack = build_layers(FAMILIES[family], 3, 8, {}, num_layers=3, dropout=0.2)
    assert isinstance(stack, StackedLayers) and len(stack.layers) == 3
    single = FAMILIES[family](3, 8)
    assert set(stack.parameter_groups()) == set(single.parameter_groups())
    grouped = [p for params in stack.parameter_groups().values() for p in params]
    assert len(grouped) == len({id(p) for p in grouped}) == len(list(stack.parameters()))
    assert stack.output_size == single.output_size
    out = stack.eval()(torch.randn(2, 5, 3))
    assert out.shape == (2, 5, stack.output_size) and torch.isfinite(out).all()


def test_a_stack_of_lstms_has_the_parameters_of_a_two_layer_nn_lstm():
    ours = build_layers(FAMILIES["lstm"], 4, 16, {}, num_layers=2)
    reference = torch.nn.LSTM(4, 16, num_layers=2)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())


def test_complex_layers_feed_their_two_n_features_to_the_next_layer():
    stack = build_layers(FAMILIES["scurnn"], 3, 6, {}, num_layers=2)
    assert stack.layers[1].input_size == 12 and stack.output_size == 12


def test_dropout_acts_between_layers_only_in_training():
    torch.manual_seed(0)
    stack = build_layers(FAMILIES["rnn"], 3, 32, {}, num_layers=2, dropout=0.5)
    x = torch.randn(4, 6, 3)
    stack.train()
    assert not torch.equal(stack(x), stack(x))  # a fresh dropout mask each call
    stack.eval()
    torch.testing.assert_close(stack(x), stack(x), rtol=0, atol=0)
    # the top layer's output is not dropped: no exact zeros beyond what the layer itself produces in eval
    lower, upper = stack.layers
    torch.testing.assert_close(stack(x), upper(lower(x)), rtol=0, atol=0)


def test_stacked_parameter_count_and_budget_sizing():
    one = parameter_count("lstm", 20, 2, 1)
    two = parameter_count("lstm", 20, 2, 1, num_layers=2)
    assert two - one == 4 * (20 * 20 + 20 * 20 + 2 * 20)  # the second layer's LSTM weights and biases
    n = hidden_size_for_budget("lstm", 10_000, 2, 1, num_layers=2)
    miss = [abs(parameter_count("lstm", size, 2, 1, num_layers=2) - 10_000) for size in (n - 1, n, n + 1)]
    assert miss[1] == min(miss)  # the stack's count closest to the budget


def test_symbol_embedding_is_a_first_layer_option():
    # SRNN embeds symbol ids itself; layer 2 reads real features, so it must not embed
    stack = build_layers(FAMILIES["srnn"], 10, 16, {"embed_symbols": True, "hyper": 8}, num_layers=2)
    assert stack.embeds_symbols and stack.layers[0].embed_symbols and not stack.layers[1].embed_symbols
    model = SequenceModel(stack, 9, vocab_size=10)
    assert model(torch.randint(0, 10, (2, 7))).shape == (2, 7, 9)


@pytest.mark.parametrize(
    "num_layers,dropout,key",
    [
        (0, 0.0, "model.num_layers"),
        (2, 1.0, "model.dropout"),
        (1, 0.3, "model.dropout"),
        (2.5, 0.0, "model.num_layers"),
    ],
)
def test_bad_stacking_options_name_the_key(num_layers, dropout, key):
    with pytest.raises(ConfigError, match=key):
        build_layers(FAMILIES["lstm"], 2, 4, {}, num_layers=num_layers, dropout=dropout)


def test_the_module_trains_a_stack_and_records_its_shape_in_hparams():
    torch.manual_seed(0)
    module = RecurrentModule(
        task=COPYING, family="scornn", hidden_size=8, num_layers=2, dropout=0.1, family_args={"rho": 4}
    )
    assert module.hparams.num_layers == 2 and module.hparams.dropout == 0.1
    assert isinstance(module.model.layer, StackedLayers)
    counts = module.parameter_counts()
    assert counts["recurrent"] == 2 * 8 * 7 // 2  # both layers' A, trained by one optimizer
    w = module.model.layer.recurrent_matrix()  # the analyses see layer 1's W
    a = module.model.layer.layers[0].cayley.skew().detach()
    # float32 Cayley transform, n = 8: n eps32 cond(I + A) (<= sqrt(2) at the init)
    torch.testing.assert_close(w.t() @ w, torch.eye(8), atol=roundoff(torch.float32, 8, cond(torch.eye(8) + a)), rtol=0)


def test_after_optimizer_step_reaches_every_layer():
    calls = []

    class Counting(FAMILIES["rnn"]):
        def after_optimizer_step(self):
            calls.append(self)

    stack = build_layers(Counting, 2, 4, {}, num_layers=3)
    stack.after_optimizer_step()
    assert calls == list(stack.layers)


def test_the_cli_trains_and_records_a_stacked_model(tmp_path, monkeypatch):
    from test_cli import DEMO, TINY

    from ortholab.cli.main import main
    from ortholab.db import Store

    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", db, "--model.num_layers", "2", "--model.dropout", "0.2"])
    (run,) = Store(db).list_runs()
    detail = Store(db).get_run(run.id)
    assert run.status == "finished" and run.steps == 6
    assert detail.params["model.num_layers"] == 2 and detail.params["model.dropout"] == 0.2
    assert detail.info["parameter_counts"]["recurrent"] == 2 * 8 * 7 // 2
