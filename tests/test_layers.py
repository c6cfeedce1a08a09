"""Every family as an nn.RNN-style layer (models/layers.py, `ortholab.nn`): gradients, state round-trips, a user's
model, and the same numbers as `ortholab fit`."""

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from tolerances import close, norm, roundoff
from torch import nn

from ortholab import nn as onn
from ortholab.datamodules.adding import adding_batch
from ortholab.datamodules.copying import copying_batch
from ortholab.db import frames
from ortholab.models import FAMILIES
from ortholab.training.api import fit

# the tiny options each family needs (NRU: M k a perfect square; SRNN: f_r's width; LRU, S4D: the state's size)
TINY = {"nru": {"memory_size": 4, "heads": 1}, "srnn": {"hyper": 4}, "lru": {"state_size": 3}, "s4d": {"state_size": 4}}
# options under which a parameter's .grad is dL/dparameter (the defaults hand some groups the papers' step instead:
# scuRNN's A Theorem 2's direction, the full-capacity uRNN's W the code's top blocks, nnRNN's alpha a penalty)
TRUE_GRADIENTS = {
    "scurnn": {"a_gradient": "coordinates"},
    "fcurnn": {"w_gradient": "full"},
    "nnrnn": {"alpha_penalty": 0.0},
}
CASES = [(family, {}) for family in onn.LAYERS] + [
    ("eurnn", {"recurrence": "layers"}),
    ("rnn", {"nonlinearity": "relu"}),
]
# gradcheck's full mode takes a backward pass per output entry and two forward passes per input entry; a call of
# the uRNN's compiled loops costs ~10 ms even at this size, which makes its full check minutes on a shared CPU. By
# default the uRNN is checked in gradcheck's fast mode (a random projection u^T J v against finite differences),
# in full under -m slow.
FULL_MODE_SLOW = ("urnn",)
# families whose W is orthogonal or unitary by construction, and stays so under training (nnRNN keeps its basis P
# so, and W = P (Lambda + T) P^T is not: models/base.py `keeps_orthogonal`, `orthogonal_map`)
ORTHOGONAL = tuple(family for family in onn.LAYERS if FAMILIES[family].keeps_orthogonal)


def _layer(family, input_size, hidden_size, **kwargs):
    return onn.LAYERS[family](input_size, hidden_size, **{**TINY.get(family, {}), **kwargs})


def _parts(state):
    return list(state) if isinstance(state, tuple) else [state]


def _random_state(layer, batch, generator):
    """A random h0 in the layer's format: (num_layers, N, features) per part of the state."""
    parts = [
        torch.randn(layer.num_layers, batch, size, generator=generator, dtype=torch.float64) / 2
        for size in layer.state_size.values()
    ]
    return parts[0] if len(parts) == 1 else tuple(parts)


def test_every_family_with_a_state_has_a_layer_and_rtransformer_is_refused():
    assert set(onn.LAYERS) == set(FAMILIES) - {"rtransformer"}
    for family, layer in onn.LAYERS.items():  # named and described by the family's own class (its `layer_doc`)
        assert getattr(onn, layer.__name__) is layer and layer.__name__ == FAMILIES[family].__name__
        assert layer.__doc__ and "Groups:" in layer.__doc__, family
        # help() and an editor show the options and what they mean (the signature once showed **family_args)
        options = set(inspect.signature(FAMILIES[family].__init__).parameters) - {"self", "input_size", "hidden_size"}
        cells_doc = inspect.cleandoc(FAMILIES[family].__doc__)
        assert options <= set(inspect.signature(layer).parameters) and cells_doc in layer.__doc__
    with pytest.raises(ValueError, match="rtransformer.*no nn.RNN form.*RTransformer"):
        onn.FamilyRNN("rtransformer", 3, 8)
    with pytest.raises(ValueError, match="'rhoo' is not an option of family 'scornn'"):
        onn.ScoRNN(3, 8, rhoo=4)
    # a review's audit: NaN passed every range check (the LSTM's outputs all NaN); a bad device was torch's error
    with pytest.raises(ValueError, match="forget_bias = nan must be a number \\(family 'lstm'"):
        onn.LSTM(4, 8, forget_bias=float("nan"))
    with pytest.raises(ValueError, match="alpha_penalty = nan must be a number \\(family 'nnrnn'"):
        onn.NNRNN(4, 8, alpha_penalty=float("nan"))
    with pytest.raises(ValueError, match="ScoRNN: device 'nodev' is not a torch device"):
        onn.ScoRNN(4, 8, device="nodev")


class _Recomputed(torch.autograd.Function):
    """f's value; each backward runs f again on fresh copies, so that every one of gradcheck's backward passes has a
    graph of its own (the uRNN/EURNN recurrences backpropagate once per forward, models/operator_recurrence.py)."""

    @staticmethod
    def forward(ctx, f, *inputs):
        ctx.f = f
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return f(*inputs)

    @staticmethod
    def backward(ctx, grad):
        inputs = [x.detach().requires_grad_() for x in ctx.saved_tensors]
        with torch.enable_grad():
            grads = torch.autograd.grad(ctx.f(*inputs), inputs, grad, allow_unused=True)
        return (None, *grads)


def _gradcheck_cases():
    for family, options in CASES:
        name = f"{family}-{'-'.join(map(str, options.values()))}".strip("-")
        yield pytest.param(family, options, family in FULL_MODE_SLOW, id=name)
        if family in FULL_MODE_SLOW:
            yield pytest.param(family, options, False, id=f"{name}-full", marks=pytest.mark.slow)


@pytest.mark.parametrize("family, options, fast_mode", list(_gradcheck_cases()))
def test_layer_gradcheck_in_float64(family, options, fast_mode):
    """d(output, h_n) / d(input, h0, every parameter) of a 2-layer stack against finite differences."""
    torch.manual_seed(3)
    layer = _layer(family, 2, 3, num_layers=2, dtype=torch.float64, **TRUE_GRADIENTS.get(family, {}), **options)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 2, 2, generator=g, dtype=torch.float64)  # (L, N, H_in): nn.RNN's default layout
    state = _parts(_random_state(layer, 2, g))
    names = [name for name, _ in layer.named_parameters()]

    def run(x, *rest):
        h0, params = rest[: len(state)], rest[len(state) :]
        output, h_n = torch.func.functional_call(layer, dict(zip(names, params)), (x, h0[0] if len(h0) == 1 else h0))
        return torch.cat([output.reshape(-1)] + [part.reshape(-1) for part in _parts(h_n)])

    inputs = [t.detach().clone().requires_grad_() for t in (x, *state, *layer.parameters())]
    assert torch.autograd.gradcheck(lambda *args: _Recomputed.apply(run, *args), inputs, fast_mode=fast_mode)


@pytest.mark.parametrize("family", list(onn.LAYERS))
@pytest.mark.parametrize("given_h0", [False, True], ids=["own_h0", "given_h0"])
def test_two_halves_with_h_n_passed_on_equal_the_whole(family, given_h0):
    torch.manual_seed(5)
    layer = _layer(family, 3, 4, num_layers=2, dtype=torch.float64)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(7, 2, 3, generator=g, dtype=torch.float64)
    h0 = _random_state(layer, 2, g) if given_h0 else None
    whole, h_whole = layer(x, h0)
    first, h_half = layer(x[:4], h0)
    second, h_end = layer(x[4:], h_half)
    # the same operations on the same numbers, but a compiled loop (uRNN's, numba fastmath) may contract a step's
    # products differently at the call boundary: round-off of 7 steps over 2 layers, each summing 2n + H_in terms
    bound = close(torch.float64, n=7 * 2 * (8 + 3), scale=norm(whole))
    torch.testing.assert_close(torch.cat([first, second]), whole, **bound)
    for got, expected in zip(_parts(h_end), _parts(h_whole)):
        torch.testing.assert_close(got, expected, **bound)
    assert tuple(_parts(h_whole)[0].shape) == (2, 2, layer.state_size["h"])


@pytest.mark.parametrize("family", ["scornn", "eurnn", "lstm"])
def test_batch_first_and_unbatched_inputs_as_nn_rnn(family):
    torch.manual_seed(7)
    layer = _layer(family, 3, 4)
    x = torch.randn(5, 2, 3)
    output, h_n = layer(x)
    layer.batch_first = True
    output_bf, h_n_bf = layer(x.transpose(0, 1))
    torch.testing.assert_close(output_bf.transpose(0, 1), output, rtol=0, atol=0)
    single, h_single = layer(x[:, 1])  # (L, H_in): one sequence without a batch dimension
    torch.testing.assert_close(single, output[:, 1], **close(torch.float32, n=5 * 11, scale=norm(output)))
    for part, whole in zip(_parts(h_single), _parts(h_n)):
        assert part.shape == whole[:, 1].shape
        torch.testing.assert_close(part, whole[:, 1], **close(torch.float32, n=5 * 11, scale=norm(whole)))
    wrong_batch = tuple(part.double() for part in _parts(_random_state(layer, 5, torch.Generator())))
    with pytest.raises(ValueError, match=r"h0's h must have shape \(1, 2, \d+\) .*got \(1, 5, \d+\)"):
        layer(x.transpose(0, 1), wrong_batch[0] if len(wrong_batch) == 1 else wrong_batch)


def test_complex_families_say_how_their_features_hold_h():
    torch.manual_seed(8)
    for family, layout in (
        ("scurnn", "planar"),
        ("fcurnn", "planar"),
        ("urnn", "interleaved"),
        ("eurnn", "interleaved"),
    ):
        layer = _layer(family, 3, 4, batch_first=True)
        assert layer.layout == layout and layer.output_size == 8
        output, h_n = layer(torch.randn(2, 5, 3))
        h = layer.as_complex(h_n[0])
        assert h.dtype == torch.complex64 and h.shape == (2, 4)
        real, imag = (h_n[0][:, :4], h_n[0][:, 4:]) if layout == "planar" else (h_n[0][:, 0::2], h_n[0][:, 1::2])
        assert torch.equal(h.real, real) and torch.equal(h.imag, imag)
        assert torch.equal(h_n[0], output[:, -1])  # h_n is the last step's state
    with pytest.raises(ValueError, match="real state"):
        _layer("scornn", 3, 4).as_complex(torch.zeros(4))


class Summer(nn.Module):
    """A user's model for the adding problem; swapping nn.RNN for an OrthoLab family is the one changed line."""

    def __init__(self, rnn_class, **options):
        super().__init__()
        self.rnn = rnn_class(2, 8, batch_first=True, dtype=torch.float64, **options)  # was nn.RNN(2, 8, ...)
        self.head = nn.Linear(self.rnn.output_size, 1, dtype=torch.float64)

    def forward(self, x):
        output, _ = self.rnn(x)
        return self.head(output[:, -1])


@pytest.mark.parametrize("family", list(onn.LAYERS))
def test_a_user_model_with_the_family_trains_and_w_stays_orthogonal(family):
    torch.manual_seed(9)
    model = Summer(onn.LAYERS[family], **TINY.get(family, {}))
    before = _unitarity_error(model.rnn) if family in ORTHOGONAL else None
    x, y = adding_batch(16, 10, torch.Generator().manual_seed(10))
    x, y = x.double(), y.double()
    optimizer = onn.group_optimizer(model, {"default": {"name": "adam", "lr": 1e-2}})  # fcurnn: W's Stiefel step
    assert set(optimizer.optimizers) == {name for name, ps in onn.parameter_groups(model).items() if ps}
    losses = []
    for _ in range(5):
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(math.isfinite(value) for value in losses) and losses[-1] < losses[0], losses
    if family in ORTHOGONAL:
        # forming W (a solve, an exponential, a product of n factors) and W^H W each sum n terms per entry, and the
        # Stiefel step (fcurnn) adds that much per step: (5 + 2) n^2 roundings, measured over n^2 entries (sqrt(n));
        # added to W's error at the start
        n = model.rnn.hidden_size
        assert _unitarity_error(model.rnn) <= before + roundoff(torch.float64, n=7 * n * n, scale=math.sqrt(n))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("family", list(onn.LAYERS))
def test_a_batch_of_no_sequences_gives_empty_outputs_as_nn_rnn(family, batch_first):
    """N = 0 (a filtered batch left empty): the uRNN's FFT, the LRU's and S4D's reshapes raised internal errors."""
    layer = _layer(family, 3, 4, batch_first=batch_first)
    shape = (lambda n: (n, 5, 3)) if batch_first else (lambda n: (5, n, 3))
    output, h_n = layer(torch.randn(shape(0)))
    some, some_h_n = layer(torch.randn(shape(2)))
    assert output.shape == (*shape(0)[:2], some.shape[-1])
    for empty, part in zip(_parts(h_n), _parts(some_h_n)):
        assert empty.shape == (part.shape[0], 0, part.shape[2])


# the layers differentiable twice: autograd's own backward (LSTM, GRU, RNN, NRU), the LRU's scan, and the LRU's and
# S4D's step-by-step `mode: recurrence`, which the refusal of the others names as the way to a second derivative
TWICE = {"lstm", "gru", "rnn", "nru", "lru"}
SECOND_DERIVATIVE_CASES = [*CASES, ("lru", {"mode": "recurrence"}), ("s4d", {"mode": "recurrence"})]


@pytest.mark.parametrize("family, options", SECOND_DERIVATIVE_CASES)
def test_a_second_derivative_is_right_or_refused_in_one_line(family, options):
    """Some hand-written backwards returned a gradient with no graph behind it under create_graph=True: the uRNN's,
    EURNN's and S4D's second derivatives came out wrong (zero along the recurrence) without a word. Which layers
    answer and which refuse is pinned: a family that stopped being differentiable twice fails here."""
    torch.manual_seed(0)
    layer = _layer(family, 3, 4, batch_first=True, dtype=torch.float64, **options)
    x = torch.randn(1, 3, 3, dtype=torch.float64, requires_grad=True)
    twice = family in TWICE or options.get("mode") == "recurrence"
    if twice:
        assert torch.autograd.gradgradcheck(lambda x: layer(x)[0], (x,), fast_mode=True)
        return
    try:
        torch.autograd.gradgradcheck(lambda x: layer(x)[0], (x,), fast_mode=True)
    except RuntimeError as refused:
        assert "has a hand-written backward that gives first derivatives only" in str(refused), str(refused)
    else:  # a new family on autograd's own backward lands here
        pytest.fail(
            f"{family} gave a second derivative instead of refusing one; if it runs on autograd's own backward it is "
            "differentiable twice: add it to TWICE in tests/test_layers.py"
        )


@pytest.mark.parametrize("made", ["dtype", "double"])
@pytest.mark.parametrize("family", ORTHOGONAL)
def test_a_float64_layer_starts_orthogonal_to_float64_round_off(family, made):
    """fcurnn's W and dtriv expRNN's base are stored, drawn in float32: built with dtype=torch.float64 or made so by
    .double() (as Lightning's 64-true does), they were unitary to ~1e-7 only, and Stiefel steps never fixed that."""
    options = {**TINY.get(family, {}), **({"trivialization": "dtriv"} if family == "exprnn" else {})}
    torch.manual_seed(3)
    single = onn.LAYERS[family](3, 16, **options)
    torch.manual_seed(3)
    layer = onn.LAYERS[family](3, 16, dtype=torch.float64, **options) if made == "dtype" else single.double()
    n = 16
    # forming W and W^H W each sum n terms per entry (n^2 roundings, the SVD's p(n) alike), Frobenius over n^2 entries
    assert _unitarity_error(layer) <= roundoff(torch.float64, n=2 * n * n, scale=math.sqrt(n))
    torch.manual_seed(3)
    w32 = onn.LAYERS[family](3, 16, **options).cells[0].orthogonal_map().detach()
    w64 = layer.cells[0].orthogonal_map().detach()
    # the float64 W is the float32 one up to float32's forming error: n^2 roundings (oRNN: n products of n terms)
    moved = float(torch.linalg.matrix_norm(w64 - w32.to(w64.dtype)))
    assert moved <= roundoff(torch.float32, n=n * n, scale=math.sqrt(n))


def _unitarity_error(layer) -> float:
    w = layer.cells[0].orthogonal_map().detach()
    return float(torch.linalg.matrix_norm(w.mH @ w - torch.eye(w.shape[0], dtype=w.dtype)))


def test_groups_cover_every_parameter_once_and_papers_optimizers_load():
    model = Summer(onn.ScuRNN)
    groups = onn.parameter_groups(model)
    assert sorted(groups) == ["other", "recurrent", "scaling"]
    flat = [id(p) for params in groups.values() for p in params]
    assert sorted(flat) == sorted(id(p) for p in model.parameters())
    assert {id(p) for p in model.head.parameters()} <= {id(p) for p in groups["other"]}
    specs = onn.paper_optimizers("scurnn_copying_T1000")
    optimizer = onn.group_optimizer(model, "scurnn_copying_T1000")
    for name, spec in specs.items():
        torch_optimizer = optimizer.optimizers[name]
        assert isinstance(torch_optimizer, onn.OPTIMIZERS[spec["name"]])
        assert torch_optimizer.param_groups[0]["lr"] == spec["lr"]
    with pytest.raises(ValueError, match="optimizers.reccurent: there is no parameter group"):
        onn.group_optimizer(model, {"reccurent": {"name": "adam"}, "default": {"name": "adam"}})
    with pytest.raises(ValueError, match="neither a file nor an installed config"):
        onn.paper_optimizers("no_such_config")


def test_stacked_full_capacity_urnn_gets_one_stiefel_step_per_layer():
    model = Summer(onn.FullCapacityURNN, num_layers=2)
    optimizer = onn.group_optimizer(model, {"default": {"name": "adam", "lr": 1e-2}})
    stiefel = optimizer.optimizers["recurrent"]
    assert isinstance(stiefel, onn.StiefelCayley) and len(stiefel.param_groups) == 2


# the same numbers as `ortholab fit` ----------------------------------------------------------------------------
SEED, DATA_SEED, DELAY, TRAIN, BATCH, STEPS, HIDDEN = 7, 11, 5, 40, 10, 6, 8
KINDS = {  # one family per kind: real, complex, gated; with the papers' optimizers (TF1 RMSProp) where they have them
    "scornn": (
        {"rho": 4},
        {"recurrent": {"name": "rmsprop_tf", "lr": 1e-3}, "other": {"name": "rmsprop_tf", "lr": 1e-2}},
    ),
    "scurnn": (
        {},
        {
            "recurrent": {"name": "rmsprop_tf", "lr": 1e-3},
            "scaling": {"name": "rmsprop_tf", "lr": 1e-3},
            "other": {"name": "adam", "lr": 1e-2},
        },
    ),
    "lstm": ({}, {"default": {"name": "rmsprop_tf", "lr": 1e-2}}),
}


class Copier(nn.Module):
    """A user's copying-task model laid out as `ortholab fit` builds one: one-hot symbols, the layer, a readout."""

    def __init__(self, family, family_args):
        super().__init__()
        self.rnn = onn.LAYERS[family](10, HIDDEN, batch_first=True, **family_args)
        self.readout = nn.Linear(self.rnn.output_size, 9)
        nn.init.xavier_uniform_(self.readout.weight)  # the readout's initialisation in ortholab fit (Glorot, zero bias)
        nn.init.zeros_(self.readout.bias)

    def forward(self, symbols):
        return self.readout(self.rnn(F.one_hot(symbols, 10).float())[0])


@pytest.mark.parametrize("family", list(KINDS))
def test_the_layer_in_a_users_loop_reproduces_ortholab_fit(family, tmp_path):
    family_args, optimizers = KINDS[family]
    config = {
        "seed_everything": SEED,
        "model": {"family": family, "hidden_size": HIDDEN, "family_args": family_args, "optimizers": optimizers},
        "data": {
            "class_path": "ortholab.datamodules.CopyingTask",
            "init_args": {
                "seq_len": DELAY,
                "train_size": TRAIN,
                "batch_size": BATCH,
                "val_size": 20,
                "test_size": 20,
                "seed": DATA_SEED,
            },
        },
        "trainer": {
            "accelerator": "cpu",
            "max_steps": STEPS,
            "val_check_interval": 3,
            "check_val_every_n_epoch": None,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        },
    }
    db = f"sqlite:///{tmp_path / 'store.db'}"
    run_id = fit(config, db=db, runs_dir=str(tmp_path / "runs"))
    recorded = frames.metrics(run_id, "train/loss", db=db)["value"].tolist()

    torch.manual_seed(SEED)  # what seed_everything does before the model is built
    model = Copier(family, family_args)
    optimizer = onn.group_optimizer(model, optimizers)
    inputs, targets = copying_batch(TRAIN, DELAY, torch.Generator().manual_seed(DATA_SEED))  # the task's train split
    losses = []
    for step in range(STEPS):  # batches in order, from the start again after each epoch (shuffle off)
        batch = slice(step % (TRAIN // BATCH) * BATCH, (step % (TRAIN // BATCH) + 1) * BATCH)
        loss = F.cross_entropy(model(inputs[batch]).reshape(-1, 9), targets[batch].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert len(recorded) == STEPS and losses[-1] != losses[0]
    # the same operations on the same numbers in the same process: equal to the bit
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(recorded), rtol=0, atol=0)


def test_a_group_the_full_capacity_urnn_steps_on_its_manifold_holds_no_other_familys_parameters():
    """A scoRNN and a full-capacity uRNN in one model: their `recurrent` groups merged, so one optimizer stepped
    both (the uRNN's W left U(n) under RMSprop without a word, or Stiefel's step refused scoRNN's A)."""
    model = nn.ModuleDict({"a": onn.ScoRNN(2, 8, batch_first=True), "b": onn.FullCapacityURNN(8, 8, batch_first=True)})
    with pytest.raises(ValueError, match=r"group 'recurrent' would hold the parameters of \['fcurnn', 'scornn'\]"):
        onn.group_optimizer(model, {"recurrent": {"name": "rmsprop_tf", "lr": 1e-2}, "other": {"name": "adam"}})
    two = nn.ModuleDict({"a": onn.FullCapacityURNN(2, 8), "b": onn.FullCapacityURNN(2, 8)})  # one family: fine
    optimizer = onn.group_optimizer(two, {"default": {"name": "adam", "lr": 1e-3}})
    assert optimizer.specs["recurrent"]["name"] == "stiefel_cayley"
    assert onn.group_optimizer(model["b"], {"default": {"name": "adam"}}).specs["recurrent"]["name"] == "stiefel_cayley"
    # another family's plain default (the LRU's Adam at lr 5e-4) would train scoRNN's A unasked: name the group
    mixed = nn.ModuleDict({"a": onn.ScoRNN(2, 8), "b": onn.LRU(8, 8, state_size=3)})
    with pytest.raises(ValueError, match=r"\['lru'\] steps it with adam: name specs\['recurrent'\] yourself"):
        onn.group_optimizer(mixed, {"default": {"name": "adam"}})
    named = onn.group_optimizer(mixed, {"recurrent": {"name": "adam", "lr": 1e-3}, "default": {"name": "adam"}})
    assert named.specs["recurrent"] == {"name": "adam", "lr": 1e-3}


def test_the_families_that_keep_a_map_orthogonal_say_so():
    """The family tests check `keeps_orthogonal` families (a new one included); none of these may drop out."""
    known = {"scornn", "scurnn", "ornn", "srnn", "exprnn", "nnrnn", "urnn", "eurnn", "fcurnn"}
    keeping = {f for f, cls in FAMILIES.items() if cls.keeps_orthogonal}  # a new family that says so joins them
    assert known <= keeping and set(ORTHOGONAL) == keeping
    assert all(
        onn.LAYERS[family](3, 4, **TINY.get(family, {})).cells[0].orthogonal_map() is None
        for family in set(onn.LAYERS) - keeping
    )
