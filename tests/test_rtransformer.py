"""R-Transformer: local recurrent windows, causal attention, any registered family as the local cell."""

import importlib.util
from pathlib import Path

import pytest
import torch
from tolerances import close, cond, roundoff
from torch import nn

from ortholab.models import FAMILIES, ConfigError, SequenceModel
from ortholab.models.rtransformer import CausalSelfAttention, LocalRecurrence, RTransformer, UnbiasedLayerNorm


def test_local_recurrence_reads_exactly_the_window_ending_at_t():
    torch.manual_seed(0)
    cell = FAMILIES["gru"](4, 4)
    local = LocalRecurrence(cell, 4, window=3)
    x = torch.randn(2, 7, 4)
    out = local(x)
    padded = torch.cat([torch.zeros(2, 2, 4), x], dim=1)
    for t in range(7):  # the oracle: run the cell on each window separately
        torch.testing.assert_close(out[:, t], cell(padded[:, t : t + 3])[:, -1])


def test_outputs_are_causal():
    torch.manual_seed(0)
    layer = RTransformer(3, 8, heads=2, levels=2).eval()
    x = torch.randn(2, 9, 3)
    changed = x.clone()
    changed[:, 5:] += torch.randn(2, 4, 3)
    torch.testing.assert_close(layer(x)[:, :5], layer(changed)[:, :5])
    assert not torch.allclose(layer(x)[:, 5:], layer(changed)[:, 5:])


def test_attention_reaches_beyond_the_local_window():
    torch.manual_seed(0)
    layer = RTransformer(3, 8, heads=2, window=2, levels=1).eval()
    x = torch.randn(1, 10, 3)
    changed = x.clone()
    changed[:, 0] += 1.0
    assert not torch.allclose(layer(x)[:, -1], layer(changed)[:, -1])  # step 9 sees step 0 through attention


@pytest.mark.parametrize(
    "cell,cell_args", [("gru", {}), ("srnn", {"hyper": 8}), ("scornn", {"rho": 4}), ("scurnn", {}), ("lstm", {})]
)
def test_any_family_is_the_local_cell_and_keeps_its_parameter_groups(cell, cell_args):
    torch.manual_seed(0)
    layer = RTransformer(5, 8, cell=cell, cell_args=cell_args, heads=2, levels=2, local_layers=2)
    assert len(layer.cells) == 4 and all(isinstance(c, FAMILIES[cell]) for c in layer.cells)
    groups = layer.parameter_groups()
    assert set(groups) == set(FAMILIES[cell](8, 8, **cell_args).parameter_groups()) | {"other"}
    grouped = [p for params in groups.values() for p in params]
    assert len(grouped) == len({id(p) for p in grouped}) == len(list(layer.parameters()))
    model = SequenceModel(layer, 4)
    out = model(torch.randn(3, 6, 5))
    out.sum().backward()
    assert out.shape == (3, 6, 4) and all(p.grad is not None for p in layer.parameters())


def test_an_orthogonal_cell_exposes_its_recurrent_matrix():
    layer = RTransformer(2, 8, cell="scornn", cell_args={"rho": 4}, heads=2)
    w = layer.recurrent_matrix()
    a = layer.cells[0].cayley.skew().detach()
    # float32 Cayley transform, n = 8: n eps32 cond(I + A) (<= sqrt(2) at the init)
    torch.testing.assert_close(w.t() @ w, torch.eye(8), atol=roundoff(torch.float32, 8, cond(torch.eye(8) + a)), rtol=0)
    assert RTransformer(2, 8, heads=2).recurrent_matrix() is None  # GRU has none


def test_official_music_width_parameter_count():
    # d_model 160, 3 levels of (GRU LocalRNN, attention, feed-forward), 88 piano keys in and out
    layer = RTransformer(88, 160)
    gru = 3 * (2 * 160 * 160 + 2 * 160)
    attention = 4 * (160 * 160 + 160)
    feed_forward = 160 * 640 + 640 + 640 * 160 + 160
    norms = 3 * 2 * 160
    assert sum(p.numel() for p in layer.parameters()) == 88 * 160 + 160 + 3 * (gru + attention + feed_forward + norms)


def test_layer_norm_is_the_official_codes():
    # DSE-MSU/R-transformer models/RTransformer.py lines 11-22: a_2 * (x - mean) / (x.std(-1) + 1e-6) + b_2
    torch.manual_seed(0)
    norm = UnbiasedLayerNorm(6)
    with torch.no_grad():
        norm.weight.normal_(), norm.bias.normal_()
    x = torch.randn(4, 5, 6, dtype=torch.float64) * 3 + 1
    norm = norm.double()
    official = norm.weight * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-6) + norm.bias
    torch.testing.assert_close(norm(x), official, rtol=0, atol=0)
    # what the option changes: torch's LayerNorm divides by the biased std, a factor sqrt(n/(n-1)) = sqrt(6/5) larger;
    # float64, a mean and a std over n = 6 features of a unit-size result: n eps64 of round-off
    biased = nn.LayerNorm(6, eps=0.0).double()(x)
    unbiased = (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)
    torch.testing.assert_close(biased, unbiased * (6 / 5) ** 0.5, **close(torch.float64, 6))


def _attention_tensors(layer):
    attention = [m.attention for m in layer.modules() if isinstance(m, CausalSelfAttention)]
    assert attention
    return [(a.in_proj_weight, a.in_proj_bias, a.out_proj.weight, a.out_proj.bias) for a in attention]


def test_attention_is_initialised_as_the_official_linears_and_torch_layers_keeps_torchs():
    # official: four nn.Linear(d, d), weights and biases uniform in +-1/sqrt(d) (std bound/sqrt(3));
    # nn.MultiheadAttention: Xavier in_proj (bound sqrt(6/(d+3d)) per the stacked 3d x d matrix), zero biases
    torch.manual_seed(0)
    width = 160
    bound = width**-0.5
    for tensors in _attention_tensors(RTransformer(88, width)):
        weights = torch.cat([t.detach().flatten() for t in tensors])
        assert weights.abs().max() <= bound
        # 4d(d+1) = 103,040 uniform samples: the sample std is within 1% of bound/sqrt(3) (its relative
        # standard error is sqrt(0.8/4N) ~ 0.14%), while torch's pooled init differs by more than 10%
        assert abs(weights.std().item() / (bound / 3**0.5) - 1) < 0.01
        assert tensors[1].abs().min() > 0 and tensors[3].abs().min() > 0
    torch.manual_seed(0)
    for tensors in _attention_tensors(RTransformer(88, width, torch_layers=True)):
        assert tensors[1].abs().max() == 0 and tensors[3].abs().max() == 0
        xavier = (6 / (width + 3 * width)) ** 0.5
        assert abs(tensors[0].detach().std().item() / (xavier / 3**0.5) - 1) < 0.01


def test_torch_layers_change_no_parameter_so_checkpoints_load_either_way():
    official, torch_layers = RTransformer(5, 8, heads=2), RTransformer(5, 8, heads=2, torch_layers=True)
    assert isinstance(official.levels[0][0].norm, UnbiasedLayerNorm)
    assert type(torch_layers.levels[0][0].norm) is nn.LayerNorm
    torch_layers.load_state_dict(official.state_dict())  # strict: same names and shapes
    x = torch.randn(2, 4, 5)
    assert not torch.allclose(official.eval()(x), torch_layers.eval()(x))  # the norm's formula differs


def _official_weights(inputs: int, width: int, levels: int, outputs: int) -> dict[str, torch.Tensor]:
    """A random state_dict of DSE-MSU/R-transformer's music model RT (audio/model.py) with a GRU LocalRNN: its names
    and shapes, the unused LocalRNN `output` and RTransformer `norm`/`feed_forward` included, as torch.save writes."""
    shapes = {
        "encoder.weight": (width, inputs),
        "encoder.bias": (width,),
        "linear.weight": (outputs, width),
        "linear.bias": (outputs,),
        "rt.norm.a_2": (width,),
        "rt.norm.b_2": (width,),
        "rt.feed_forward.w_1.weight": (4 * width, width),
        "rt.feed_forward.w_1.bias": (4 * width,),
        "rt.feed_forward.w_2.weight": (width, 4 * width),
        "rt.feed_forward.w_2.bias": (width,),
    }
    for level in range(levels):
        block = f"rt.forward_net.{level}."
        local = block + "layers.0."
        shapes.update(
            {
                local + "local_rnn.rnn.weight_ih_l0": (3 * width, width),
                local + "local_rnn.rnn.weight_hh_l0": (3 * width, width),
                local + "local_rnn.rnn.bias_ih_l0": (3 * width,),
                local + "local_rnn.rnn.bias_hh_l0": (3 * width,),
                local + "local_rnn.output.0.weight": (width, width),
                local + "local_rnn.output.0.bias": (width,),
                block + "feed_forward.w_1.weight": (4 * width, width),
                block + "feed_forward.w_1.bias": (4 * width,),
                block + "feed_forward.w_2.weight": (width, 4 * width),
                block + "feed_forward.w_2.bias": (width,),
            }
        )
        for norm in (local + "connection.norm.", block + "connections.0.norm.", block + "connections.1.norm."):
            shapes.update({norm + "a_2": (width,), norm + "b_2": (width,)})
        for j in range(4):
            shapes.update(
                {f"{block}pooling.linears.{j}.weight": (width, width), f"{block}pooling.linears.{j}.bias": (width,)}
            )
    weights = {name: 0.4 * torch.randn(shape, dtype=torch.float64) for name, shape in shapes.items()}
    for name in weights:  # norm gains near 1, so no layer's output vanishes
        if name.endswith("a_2"):
            weights[name] += 1.0
    return weights


def _official_forward(w: dict[str, torch.Tensor], x: torch.Tensor, window: int, heads: int) -> torch.Tensor:
    """RT.forward up to its readout (audio/model.py l.17-19), written from the equations of DSE-MSU/R-transformer's
    models/RTransformer.py over its named weights: no module of OrthoLab's runs."""

    def norm(prefix, v):  # LayerNorm, l.11-22: unbiased std, eps added to the std
        return w[prefix + "a_2"] * (v - v.mean(-1, keepdim=True)) / (v.std(-1, keepdim=True) + 1e-6) + w[prefix + "b_2"]

    def linear(prefix, v):
        return v @ w[prefix + "weight"].T + w[prefix + "bias"]

    def gru_last_state(prefix, seq):  # nn.GRU's equations from h_0 = 0, over one window
        w_ir, w_iz, w_in = w[prefix + "weight_ih_l0"].chunk(3)
        w_hr, w_hz, w_hn = w[prefix + "weight_hh_l0"].chunk(3)
        b_ir, b_iz, b_in = w[prefix + "bias_ih_l0"].chunk(3)
        b_hr, b_hz, b_hn = w[prefix + "bias_hh_l0"].chunk(3)
        h = seq.new_zeros(seq.shape[0], w_hr.shape[1])
        for v in seq.unbind(1):
            r = torch.sigmoid(v @ w_ir.T + b_ir + h @ w_hr.T + b_hr)
            z = torch.sigmoid(v @ w_iz.T + b_iz + h @ w_hz.T + b_hz)
            candidate = torch.tanh(v @ w_in.T + b_in + r * (h @ w_hn.T + b_hn))
            h = (1 - z) * candidate + z * h
        return h

    batch, steps, _ = x.shape
    h = linear("encoder.", x)
    levels = len({name.split(".")[2] for name in w if name.startswith("rt.forward_net.")})
    for level in range(levels):  # Block.forward, l.172-178
        block = f"rt.forward_net.{level}."
        # LocalRNN, l.130-145: position t reads the normed inputs t-ksize+1..t, zeros before the start
        v = torch.cat([h.new_zeros(batch, window - 1, h.shape[-1]), norm(block + "layers.0.connection.norm.", h)], 1)
        h = h + torch.stack(
            [gru_last_state(block + "layers.0.local_rnn.rnn.", v[:, t : t + window]) for t in range(steps)], 1
        )
        # MHPooling, l.73-107: query, key, value linears, scores / sqrt(d_k), future positions filled with -1e9
        v = norm(block + "connections.0.norm.", h)
        d_k = h.shape[-1] // heads
        q, k, val = (
            linear(f"{block}pooling.linears.{j}.", v).view(batch, steps, heads, d_k).transpose(1, 2) for j in range(3)
        )
        scores = (q @ k.transpose(-2, -1) / d_k**0.5).masked_fill(
            torch.ones(steps, steps, dtype=torch.bool).triu(1), -1e9
        )
        pooled = (scores.softmax(-1) @ val).transpose(1, 2).reshape(batch, steps, -1)
        h = h + linear(block + "pooling.linears.3.", pooled)
        # PositionwiseFeedForward, l.38-49
        v = norm(block + "connections.1.norm.", h)
        h = h + linear(block + "feed_forward.w_2.", torch.relu(linear(block + "feed_forward.w_1.", v)))
    return h


def _load_tool():
    path = Path(__file__).resolve().parents[1] / "tools" / "official_rtransformer_weights.py"
    spec = importlib.util.spec_from_file_location("official_rtransformer_weights", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_official_weights_in_this_layer_give_the_official_forward_in_float64():
    torch.manual_seed(0)
    inputs, width, window, heads, levels, outputs = 5, 8, 3, 2, 2, 4
    official = _official_weights(inputs, width, levels, outputs)
    converted = _load_tool().ortholab_state_dict(official)
    layer = RTransformer(inputs, width, window=window, heads=heads, levels=levels).double().eval()
    layer_weights = {k.removeprefix("model.layer."): v for k, v in converted.items() if k.startswith("model.layer.")}
    layer.load_state_dict(layer_weights)  # strict: every tensor of the layer comes from the official dict
    assert torch.equal(converted["model.readout.weight"], official["linear.weight"])
    x = torch.randn(2, 9, inputs, dtype=torch.float64)
    expected = _official_forward(official, x, window, heads)
    # float64, two orders of the same sums: an entry accumulates inner products of length <= 4 width through
    # `levels` x 3 sublayers and `window` recurrent steps, n = 4 width * 3 levels * window, on outputs of size ~1
    torch.testing.assert_close(layer(x), expected, **close(torch.float64, 4 * width * 3 * levels * window))
    torch_layers = RTransformer(inputs, width, window=window, heads=heads, levels=levels, torch_layers=True)
    torch_layers.double().eval().load_state_dict(layer_weights)
    assert not torch.allclose(torch_layers(x), expected)  # the control: torch's LayerNorm is not the official one


def test_an_official_tensor_with_no_place_is_named():
    official = _official_weights(5, 8, 1, 4)
    official["rt.forward_net.0.extra.weight"] = torch.zeros(2)
    with pytest.raises(KeyError, match="rt.forward_net.0.extra.weight"):
        _load_tool().ortholab_state_dict(official)


@pytest.mark.parametrize(
    "options,key",
    [
        ({"cell": "nope"}, "cell"),
        ({"cell": "rtransformer"}, "cell"),
        ({"heads": 3}, "heads"),
        ({"window": 0}, "window"),
        ({"dropout": 1.5}, "dropout"),
        ({"torch_layers": "yes"}, "torch_layers"),
    ],
)
def test_bad_options_name_the_key(options, key):
    with pytest.raises(ConfigError, match=key):
        RTransformer(2, 8, **options)


@pytest.mark.slow
def test_rtransformer_solves_adding_at_t50(tmp_path, monkeypatch):
    from learning import ADDING_T50, fit_recorded

    run = fit_recorded(
        tmp_path,
        monkeypatch,
        [
            "--model.family",
            "rtransformer",
            "--model.hidden_size",
            "32",
            "--model.family_args",
            "{cell: gru, window: 4, levels: 1, heads: 2, dropout: 0.0}",
            "--model.optimizers",
            "{default: {name: adam, lr: 2.0e-3}}",
            *ADDING_T50,
            "--trainer.max_steps",
            "800",
            "--trainer.val_check_interval",
            "200",
        ],
    )
    assert run.best < 0.05  # the adding baseline is 0.167


def test_the_weights_tool_writes_the_checkpoint_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    """`--help` exited 1 and a missing file was a traceback (walk-through 3)."""
    tool = _load_tool()
    with pytest.raises(SystemExit) as helped:
        tool.main(["--help"])
    assert helped.value.code == 0 and "official" in capsys.readouterr().out
    official = _official_weights(5, 8, 1, 4)
    torch.save(official, tmp_path / "official.pt")
    template = {"state_dict": {k: torch.zeros_like(v) for k, v in tool.ortholab_state_dict(official).items()}}
    torch.save({**template, "epoch": 3}, tmp_path / "template.ckpt")
    tool.main([str(tmp_path / "official.pt"), str(tmp_path / "template.ckpt"), str(tmp_path / "out.ckpt")])
    written = torch.load(tmp_path / "out.ckpt", weights_only=True)
    assert written["epoch"] == 3 and torch.equal(
        written["state_dict"]["model.readout.weight"], official["linear.weight"]
    )
    for argv, said in [
        ([str(tmp_path / "nope.pt"), str(tmp_path / "template.ckpt"), "x"], "nope.pt: no such file"),
        ([str(tmp_path / "template.ckpt"), str(tmp_path / "template.ckpt"), "x"], "not a state_dict (a mapping"),
        ([str(tmp_path / "official.pt"), str(tmp_path / "official.pt"), "x"], "not a checkpoint of an OrthoLab run"),
        ([str(tmp_path / "official.pt"), str(tmp_path / "template.ckpt"), "/no/such/dir/x"], "does not exist"),
        (
            [str(tmp_path / "template.ckpt").replace("template.ckpt", "x.pt"), str(tmp_path / "template.ckpt"), "x"],
            "no such",
        ),
    ]:
        with pytest.raises(SystemExit) as refused:
            tool.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert refused.value.code == 2 and said in err[-1] and "Traceback" not in "\n".join(err)


@pytest.mark.parametrize(
    "family_args, expected",
    [
        ("{cell: gru, cell_args: {bad: 1}}", ["model.family_args.cell_args.bad (on the command line)", "it has none"]),
        (
            "{cell: lstm, cell_args: {forget_bias: x}}",
            ["model.family_args.cell_args.forget_bias (on the command line): expected float | None, got 'x'"],
        ),
        (
            "{cell: rnn, cell_args: {nonlinearity: foo}}",
            ["model.family_args.cell_args.nonlinearity = 'foo' (on the command line)", "['tanh', 'relu']"],
        ),
        (  # refused by the cell's constructor, which names its options model.family_args.KEY
            "{cell: scornn, cell_args: {rho: 2.0}}",
            ["model.family_args.cell_args.rho = 2.0 (on the command line) as a fraction must lie in [0, 1]"],
        ),
    ],
    ids=["unknown-key", "wrong-type", "not-a-choice", "out-of-range"],
)
def test_a_bad_cell_option_is_one_line_naming_it_under_cell_args(tmp_path, monkeypatch, capsys, family_args, expected):
    from test_cli import DEMO

    from ortholab.cli.main import main

    monkeypatch.chdir(tmp_path)
    flags = ["--model.family", "rtransformer", "--model.family_args", family_args, "--model.optimizers", "{}"]
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", DEMO, *flags, "--model.hidden_size", "8", "--db", f"sqlite:///{tmp_path / 'r.db'}"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "Traceback" not in err, err[-2000:]
    (line,) = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert all(part in line for part in expected), line
