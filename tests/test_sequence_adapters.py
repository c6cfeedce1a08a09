"""model.input_adapter: symbol ids through an embedding, real inputs through a linear map, before the layer."""

import pytest
import torch
from torch import nn

from ortholab.models import ConfigError, SequenceModel
from ortholab.models.sequence import input_adapter
from ortholab.models.sizing import hidden_size_for_budget
from ortholab.training.module import RecurrentModule, build_layer

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
ADDING = {
    "name": "adding",
    "input_size": 2,
    "output_size": 1,
    "readout": "last_step",
    "loss": "mse",
    "main_metric": "val/loss",
    "main_metric_mode": "min",
}


def one_training_step(module: RecurrentModule, inputs: torch.Tensor, targets: torch.Tensor) -> dict:
    """Every parameter's value before a step of every group's optimizer, and the loss's gradients."""
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    optimizers = module.configure_optimizers()
    for optimizer in optimizers:
        optimizer.zero_grad()
    module.objective.loss(module(inputs), targets, None).backward()
    grads = {name: p.grad.detach().clone() for name, p in module.named_parameters()}
    for optimizer in optimizers:
        optimizer.step()
    return {"before": before, "grads": grads}


def assert_each_parameter_in_one_group(module: RecurrentModule) -> None:
    grouped = [p for params in module.parameter_groups().values() for p in params]
    assert len(grouped) == len({id(p) for p in grouped}) == len(list(module.parameters()))


@pytest.mark.parametrize("family", ["lstm", "scornn"])
def test_embedding_adapter_feeds_the_layer_and_trains(family):
    torch.manual_seed(0)
    module = RecurrentModule(
        COPYING,
        family=family,
        hidden_size=8,
        input_adapter="embedding",
        input_adapter_size=5,
        family_args={"rho": 4} if family == "scornn" else {},
    )
    adapter = module.model.adapter
    assert isinstance(adapter, nn.Embedding) and (adapter.num_embeddings, adapter.embedding_dim) == (10, 5)
    assert module.model.layer.input_size == 5  # the layer reads the embedding, not the 10-wide one-hot vectors
    ids = torch.randint(0, 10, (4, 7))
    torch.testing.assert_close(module.model.encode(ids), adapter.weight[ids])
    assert module(ids).shape == (4, 7, 9)
    assert_each_parameter_in_one_group(module)
    assert any(p is adapter.weight for p in module.parameter_groups()["other"])
    step = one_training_step(module, ids, torch.randint(0, 9, (4, 7)))
    assert step["grads"]["model.adapter.weight"][ids.unique()].abs().sum() > 0  # the loss reaches the embedding
    assert not torch.equal(step["before"]["model.adapter.weight"], adapter.weight)  # and its optimizer moves it
    assert module.parameter_counts()["other"] >= 10 * 5 + 8 * 9 + 9


def test_linear_adapter_maps_real_inputs_and_trains():
    torch.manual_seed(1)
    module = RecurrentModule(ADDING, family="rnn", hidden_size=6, input_adapter="linear", input_adapter_size=4)
    adapter = module.model.adapter
    assert isinstance(adapter, nn.Linear) and (adapter.in_features, adapter.out_features) == (2, 4)
    assert module.model.layer.input_size == 4 and module.model.layer.rnn.weight_ih_l0.shape == (6, 4)
    inputs = torch.randn(3, 11, 2)
    torch.testing.assert_close(module.model.encode(inputs), inputs @ adapter.weight.t() + adapter.bias)
    assert module(inputs).shape == (3, 1)
    assert_each_parameter_in_one_group(module)
    step = one_training_step(module, inputs, torch.randn(3, 1))
    assert step["grads"]["model.adapter.weight"].abs().sum() > 0 and step["grads"]["model.adapter.bias"].abs().sum() > 0
    assert not torch.equal(step["before"]["model.adapter.weight"], adapter.weight)


def test_the_default_keeps_one_hot_symbols_and_real_inputs_as_they_are():
    symbols = RecurrentModule(COPYING, family="lstm", hidden_size=8)
    real = RecurrentModule(ADDING, family="lstm", hidden_size=8)
    assert symbols.model.adapter is None and real.model.adapter is None
    assert symbols.model.layer.input_size == 10 and real.model.layer.input_size == 2
    ids = torch.tensor([[3, 0, 9]])
    torch.testing.assert_close(symbols.model.encode(ids), nn.functional.one_hot(ids, 10).float())
    assert symbols.hparams.input_adapter == "default" and symbols.hparams.input_adapter_size is None
    assert isinstance(SequenceModel(real.model.layer, 1).encode(torch.ones(1, 2, 2)), torch.Tensor)


def test_a_parameter_budget_counts_the_adapter():
    budget = 5_000
    module = RecurrentModule(
        COPYING,
        family="lstm",
        hidden_size="auto",
        param_budget=budget,
        input_adapter="embedding",
        input_adapter_size=16,
    )
    total = sum(p.numel() for p in module.parameters())
    n = module.hparams.hidden_size
    # one unit more or fewer: the LSTM's count moves by about 4 (2 n + 16 + 2) + 9, so the total lies within that
    assert abs(total - budget) <= 4 * (2 * n + 16 + 2) + 9 and module.model.layer.input_size == 16
    assert n == hidden_size_for_budget("lstm", budget - 10 * 16, 16, 9)  # the layer gets the budget less the embedding
    with pytest.raises(ConfigError, match=r"model\.param_budget = 100 leaves nothing.*input_adapter_size"):
        RecurrentModule(
            COPYING,
            family="lstm",
            hidden_size="auto",
            param_budget=100,
            input_adapter="embedding",
            input_adapter_size=16,
        )


@pytest.mark.parametrize(
    "kind, size, symbolic, message",
    [
        ("embed", 4, True, r"model\.input_adapter = 'embed'; choose one of \['default', 'embedding', 'linear'\]"),
        (
            "embedding",
            None,
            True,
            r"model\.input_adapter_size = None; model\.input_adapter: embedding needs a positive",
        ),
        ("linear", 0, False, r"model\.input_adapter_size = 0"),
        (
            "default",
            8,
            True,
            r"model\.input_adapter_size = 8 only applies with model\.input_adapter: embedding or linear",
        ),
        ("embedding", 4, False, r"embedding needs a task of symbol ids.*use model\.input_adapter: linear"),
        ("linear", 4, True, r"linear needs real-valued inputs.*use model\.input_adapter: embedding"),
    ],
)
def test_adapter_errors_name_the_key_and_the_fix(kind, size, symbolic, message):
    with pytest.raises(ConfigError, match=message):
        input_adapter(kind, 10, symbolic, size)


def test_the_cli_trains_and_records_an_embedding_adapter(tmp_path, monkeypatch):
    from test_cli import DEMO, TINY

    from ortholab.cli.main import main
    from ortholab.db import Store

    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    main(
        [
            "fit",
            "--config",
            DEMO,
            *TINY,
            "--db",
            db,
            "--model.input_adapter",
            "embedding",
            "--model.input_adapter_size",
            "4",
        ]
    )
    (run,) = Store(db).list_runs()
    detail = Store(db).get_run(run.id)
    assert run.status == "finished" and run.steps == 6
    assert detail.params["model.input_adapter"] == "embedding" and detail.params["model.input_adapter_size"] == 4
    other = 10 * 4 + 4 * 8 + 8 + 8 * 9 + 9  # the embedding, scoRNN's V (8 x 4) and b, the readout
    assert detail.info["parameter_counts"]["other"] == other


@pytest.mark.parametrize(
    "family,args,init",
    [
        ("scornn", {"rho": 8}, "glorot"),
        ("lstm", {}, "glorot"),
        ("srnn", {"hyper": 8}, "torch"),
        ("rtransformer", {"heads": 2}, "torch"),
        ("nnrnn", {}, "torch"),
    ],
)
@pytest.mark.parametrize("num_layers", [1, 2])
def test_the_readout_is_initialised_as_the_familys_official_code(family, args, init, num_layers):
    # TensorFlow codes (scoRNN, scuRNN, EURNN): tf.layers.dense, Glorot-uniform weights in +-sqrt(6/(fan_in+fan_out))
    # and zero bias; PyTorch codes (SRNN's end_fc, the R-Transformer's linear): nn.Linear's U(+-1/sqrt(fan_in)) both
    torch.manual_seed(0)
    hidden, classes = 16, 64
    layer = build_layer(family, 3, hidden, args, num_layers=num_layers)
    readout = SequenceModel(layer, classes).readout
    weight, bias = readout.weight.detach(), readout.bias.detach()
    glorot, default = (6 / (layer.output_size + classes)) ** 0.5, layer.output_size**-0.5
    bound = glorot if init == "glorot" else default
    assert weight.abs().max() <= bound
    # 64 x 16 = 1,024 uniform samples: the largest lies within 1 % of the bound but for a chance of 0.99^1024 ~ 3e-5
    # (the seed is fixed), which tells the two bounds apart (sqrt(6/80) = 0.274 against 1/4)
    assert weight.abs().max() > 0.99 * bound
    if init == "glorot":
        assert bias.abs().max() == 0
    else:
        assert 0 < bias.abs().max() <= default


@pytest.mark.parametrize(
    "how,family", [("kaiming_normal", "exprnn"), ("xavier_normal", None), ("glorot", "srnn"), ("torch", "lstm")]
)
def test_model_readout_init_overrides_the_familys(how, family):
    # a 256 x 256 readout: 65,536 normal samples, whose std is within 2 % of the target (standard error
    # 1/sqrt(2N) = 0.28 %); Kaiming (ReLU gain) std sqrt(2/256), Xavier-normal sqrt(2/512): a factor sqrt(2) apart
    torch.manual_seed(0)
    task = dict(COPYING, input_size=3, output_size=256, symbolic=False)
    module = RecurrentModule(
        task=task,
        family=family or "nru",
        hidden_size=256,
        readout_init=None if family is None else how,
        family_args={"memory_size": 16} if family is None else None,
    )
    weight, bias = module.model.readout.weight.detach(), module.model.readout.bias.detach()
    if how == "torch":
        assert 0 < bias.abs().max() <= 256**-0.5 and weight.abs().max() <= 256**-0.5
    else:
        assert bias.abs().max() == 0
    expected_std = {
        "kaiming_normal": (2 / 256) ** 0.5,
        "xavier_normal": (2 / 512) ** 0.5,
        "glorot": (2 / 512) ** 0.5,
        "torch": (1 / 256 / 3) ** 0.5,
    }[how]  # uniform: bound / sqrt(3)
    assert abs(weight.std().item() / expected_std - 1) < 0.02
    if how in ("kaiming_normal", "xavier_normal"):  # normal, not uniform: tails beyond the uniform's bound sqrt(3) std
        assert weight.abs().max() > 3**0.5 * expected_std * 1.5


def test_a_bad_readout_init_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match=r"model.readout_init = 'he'; give one of \['glorot', 'kaiming_normal'"):
        RecurrentModule(task=COPYING, family="lstm", hidden_size=4, readout_init="he")


def srnn_paper_configs(pattern: str, families: tuple[str, ...]) -> list[tuple[str, dict]]:
    """(file name, config) of each paper config matching `pattern` whose first line names the SRNN paper and whose
    model is one of `families`."""
    from pathlib import Path

    import yaml

    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "configs" / "papers").glob(pattern)):
        text = path.read_text()
        config = yaml.safe_load(text)
        if "SRNN" in text.splitlines()[0] and config["model"]["family"] in families:
            found.append((path.name, config))
    return found


def test_the_srnn_papers_baselines_read_out_as_its_code():
    # the SRNN repository's LSTM/GRU/RNN/uRNN/nnRNN heads are default nn.Linear (srnn-exprnn-facts 2; models/SRNN.py
    # nnRNN.end_fc): every config of those baselines (the SRNN code's seed 1234 and the SRNN paper named) says so
    baselines = [
        (name, config["model"].get("readout_init"))
        for name, config in srnn_paper_configs("*.yaml", ("lstm", "gru", "rnn", "urnn", "nnrnn"))
        if config.get("seed_everything") == 1234
    ]
    assert len(baselines) >= 60 and all(how == "torch" for _, how in baselines), baselines


def test_the_srnn_papers_baselines_embed_the_copying_symbols_as_its_code():
    # "For all problems involving one-hot inputs, we have added an embedding layer before the RNN" (SRNN paper,
    # Sec. 5); the code's nn.Embedding(10, d_h), 2 d_h for its uRNN port (srnn-exprnn-facts 1.2)
    embedded = []
    for name, config in srnn_paper_configs("*copying*.yaml", ("lstm", "gru", "rnn", "urnn", "nnrnn", "nru")):
        model = config["model"]
        width = model["hidden_size"] * (2 if model["family"] == "urnn" else 1)
        embedded.append((name, model.get("input_adapter"), model.get("input_adapter_size") == width))
    assert len(embedded) >= 9 and all(kind == "embedding" and size for _, kind, size in embedded), embedded
    module = RecurrentModule(
        task=COPYING, family="lstm", hidden_size=6, input_adapter="embedding", input_adapter_size=6
    )
    assert isinstance(module.model.adapter, torch.nn.Embedding) and module.model.adapter.num_embeddings == 10
