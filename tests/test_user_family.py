"""A family of the user's own, outside OrthoLab's package (a wheel installed): registered by name in a module that
$ORTHOLAB_CONFIG_MODULES names, it trains and lists as OrthoLab's own do; docs/configs.md's example is run as written.
A registration or a family that cannot work is refused in one line, before anything trains."""

import os
import re
from pathlib import Path

import pytest
from test_cli import DEMO, TINY, ortholab
from torch import nn

from ortholab import models
from ortholab.cli.main import main
from ortholab.db import Store
from ortholab.db.artifacts import GRAD_NORMS
from ortholab.models import RecurrentLayer, register_family
from ortholab.training.module import check_groups_cover_the_layer

REPO = Path(__file__).resolve().parents[1]


def _docs_example() -> str:
    """docs/configs.md's module, as a user copies it."""
    text = (REPO / "docs" / "configs.md").read_text()
    return re.search(r"```python\n(# mylab/families\.py\n.*?)```", text, re.DOTALL).group(1)


LEAKY = """

class LeftOut(OrthTanhRNN):
    def parameter_groups(self):  # W_ih and the biases in no group: they would never train
        return {"other": [self.rnn.weight_hh_l0]}


register_family("leftout", LeftOut)


class LoopTanh(OrthTanhRNN):  # the hidden states' gradients, as docs/configs.md says a family gives them
    supports_state_offsets = True

    def forward(self, x, state_offsets=None, initial_state=None):
        rnn = self.rnn
        h = x.new_zeros(x.shape[0], self.hidden_size) if initial_state is None else initial_state
        states = []
        for t in range(x.shape[1]):
            h = (x[:, t] @ rnn.weight_ih_l0.T + rnn.bias_ih_l0 + h @ rnn.weight_hh_l0.T + rnn.bias_hh_l0).tanh()
            h = h if state_offsets is None else h + state_offsets[:, t]
            states.append(h)
        return __import__("torch").stack(states, dim=1)


register_family("looptanh", LoopTanh)
"""


def test_the_docs_family_of_ones_own_trains_lists_and_one_that_leaves_parameters_out_is_refused(tmp_path):
    (tmp_path / "mylab").mkdir()
    (tmp_path / "mylab" / "__init__.py").write_text("")
    (tmp_path / "mylab" / "families.py").write_text(_docs_example() + LEAKY)
    env = {k: v for k, v in os.environ.items() if k != "ORTHOLAB_DB"} | {
        "ORTHOLAB_CONFIG_MODULES": "mylab.families",
        "PYTHONPATH": str(tmp_path),
        "ORTHOLAB_RUNS": str(tmp_path / "runs"),
    }
    own = ["--model.family", "orthtanh", "--model.family_args", "{}", "--model.optimizers", "{}"]
    done = ortholab("fit", "--config", DEMO, *TINY, *own, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    store = Store(f"sqlite:///{tmp_path / 'runs' / 'ortholab.db'}")
    (run,) = store.list_runs()
    assert run.family == "orthtanh" and run.status == "finished"
    assert "no gradient profile is recorded" in done.stderr and "configs.md#a-family-of-your-own" in done.stderr
    assert not store.artifacts(run.id, kind=GRAD_NORMS)
    own[1] = "looptanh"  # with state_offsets: the profile is recorded, without a word
    done = ortholab("fit", "--config", DEMO, *TINY, *own, cwd=tmp_path, env=env)
    assert done.returncode == 0 and "gradient profile" not in done.stderr, done.stderr
    looped = max(r.id for r in store.list_runs())
    assert store.get_run(looped).family == "looptanh" and store.artifacts(looped, kind=GRAD_NORMS)
    listed = ortholab("list", "families", cwd=tmp_path, env=env)
    assert listed.returncode == 0 and "orthtanh" in listed.stdout, listed.stderr
    own[1] = "leftout"
    refused = ortholab("fit", "--config", DEMO, *TINY, *own, cwd=tmp_path, env=env)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert (
        "model.family = 'leftout' (on the command line): its parameter_groups() leaves out ['rnn.weight_ih_l0',"
        in refused.stderr
    )
    without = {k: v for k, v in env.items() if k != "ORTHOLAB_CONFIG_MODULES"}  # a fresh shell: the name is unknown
    unknown = ortholab("fit", "--config", DEMO, *TINY, *own[:1], "orthtanh", *own[2:], cwd=tmp_path, env=without)
    assert unknown.returncode == 2 and "one of your own: register_family in a module named by" in unknown.stderr


class Tanh(RecurrentLayer):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.rnn = nn.RNN(input_size, hidden_size, batch_first=True)


class NoInputSize(RecurrentLayer):
    def __init__(self, hidden_size: int):
        super().__init__(1, hidden_size)


class OptionWithoutDefault(Tanh):
    def __init__(self, input_size: int, hidden_size: int, scale: float):
        super().__init__(input_size, hidden_size)


@pytest.mark.parametrize(
    "name, cls, error, says",
    [
        ("mytanh", nn.RNN, TypeError, "cls must be a subclass of ortholab.models.RecurrentLayer"),
        ("mytanh", "Tanh", TypeError, "cls must be a subclass"),
        ("mytanh", NoInputSize, TypeError, "cls NoInputSize must take (input_size, hidden_size, **options)"),
        ("mytanh", OptionWithoutDefault, TypeError, "OptionWithoutDefault's option 'scale' has no default"),
        ("mytanh", type("GRU", (Tanh,), {}), ValueError, "cls is named GRU, as family 'gru''s class"),  # onn.GRU
        ("scornn", Tanh, ValueError, "name 'scornn' is OrthoLab's ScoRNN already"),
        ("my-tanh", Tanh, ValueError, "name must be a short identifier"),
    ],
)
def test_a_registration_that_cannot_work_is_refused_naming_the_argument(monkeypatch, name, cls, error, says):
    monkeypatch.setattr(models, "FAMILIES", dict(models.FAMILIES))
    with pytest.raises(error, match=re.escape(says)):
        register_family(name, cls)
    assert "mytanh" not in models.FAMILIES and models.FAMILIES["scornn"].__name__ == "ScoRNN"  # nothing registered


def test_parameters_in_no_group_or_in_two_are_named():
    layer = Tanh(1, 4)
    check_groups_cover_the_layer(layer, {"other": list(layer.parameters())}, "mytanh")
    twice = {"recurrent": [layer.rnn.weight_hh_l0], "other": list(layer.parameters())}
    with pytest.raises(ValueError, match=r"holds \['rnn.weight_hh_l0'\] in more than one group"):
        check_groups_cover_the_layer(layer, twice, "mytanh")
    names = {"other": [name for name, _ in layer.named_parameters()]}  # was: "leaves out [...] (never trained)"
    with pytest.raises(
        ValueError, match=r"\['other'\] must be a list of the layer's nn.Parameter .* 'rnn.weight_ih_l0'"
    ):
        check_groups_cover_the_layer(layer, names, "mytanh")


def test_a_family_refused_while_a_module_the_variable_names_cannot_be_imported_names_that_module(monkeypatch, capsys):
    """The module may hold only tasks or callbacks this command never names, so it is not refused at once; a family
    that module might have registered is refused with the import's failure."""
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "mylab.nosuch")
    main(["list", "families"])  # nothing of it needed
    assert "scornn" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main(["list", "families", "--family", "orthtanh"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "'orthtanh' is not a registered family" in err
    assert "$ORTHOLAB_CONFIG_MODULES names 'mylab.nosuch', which Python cannot import here" in err


def test_several_modules_python_cannot_import_make_one_clause_of_the_refusal(monkeypatch, capsys):
    """The suite's own environment names four test modules a subprocess elsewhere cannot import: a clause each
    made a family's refusal over 1200 characters (CI's test_hostile_input unknown-family case)."""
    monkeypatch.setenv("ORTHOLAB_CONFIG_MODULES", "mylab.nosuch,otherlab,mylab.nosuch2")
    with pytest.raises(SystemExit):
        main(["list", "families", "--family", "orthtanh"])
    err = capsys.readouterr().err.strip()
    assert err.count("which Python cannot import here") == 1 and err.count("PYTHONPATH") == 1, err
    assert "names 'mylab.nosuch', 'otherlab', 'mylab.nosuch2', which Python cannot import here" in err, err
    assert err.count("No module named 'mylab'") == 1 and "No module named 'otherlab'" in err, err


class EveryStep(Tanh):
    def forward(self, x, state_offsets=None, initial_state=None):
        return self.rnn(x)[0]


class LastStateOnly(Tanh):  # a natural mistake: the final state (B, n) instead of every step's (B, T, n)
    def forward(self, x, state_offsets=None, initial_state=None):
        return self.rnn(x)[1][0]


def test_a_family_returning_the_wrong_shape_is_named_with_the_shape_it_must_return():
    """Before: torch's "mat1 and mat2 shapes cannot be multiplied (1x50 and 8x2)" at step 0."""
    import torch

    from ortholab.models import ConfigError
    from ortholab.models.sequence import SequenceModel

    model = SequenceModel(LastStateOnly(3, 8), output_size=2, readout="last_step")
    with pytest.raises(
        ConfigError,
        match=r"LastStateOnly's forward returned features of shape \(5, 8\) for inputs "
        r"\(5, 7, 3\): a family returns \(batch, steps, output_size\) = \(5, 7, 8\)",
    ):
        model(torch.randn(5, 7, 3))
    assert SequenceModel(EveryStep(3, 8), output_size=2)(torch.randn(5, 7, 3)).shape == (5, 7, 2)
