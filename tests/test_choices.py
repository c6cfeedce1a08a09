"""Options with named choices (issue 50): the `Literal[...]` in a constructor's signature is their one list, checked
by models/choices.py both when the constructor is called (a library call) and by the option parser
(training/family_options.py), with one wording that names the key, the value given and the choices."""

import ast
import importlib
import inspect
from pathlib import Path
from typing import Literal, Optional

import pytest
import torch

from ortholab import nn as onn
from ortholab.models import FAMILIES, ConfigError
from ortholab.models.choices import check_choices, checks_choices, literal_choices, option_choices
from ortholab.training.family_options import describe_options, family_options_rows, resolve_family_args

MODELS = Path(__file__).resolve().parents[1] / "models"
BAD = "not-a-choice"
# the options with named choices, at least: a family losing its Literal (back to `str`) fails here
EXPECTED = {
    "scornn": {"init"},
    "scurnn": {"init", "a_gradient", "d_side"},
    "rnn": {"nonlinearity"},
    "ornn": {"activation"},
    "srnn": {"shift"},
    "exprnn": {"trivialization", "init", "base_side", "rebase_gradient"},
    "nnrnn": {"init"},
    "eurnn": {"style", "rotation", "recurrence"},
    "fcurnn": {"init", "w_gradient"},
    "lru": {"norm", "mode"},
    "s4d": {"init", "mode"},
}
LITERAL_OPTIONS = [
    (family, key, choices) for family, cls in FAMILIES.items() for key, choices in option_choices(cls).items()
]


def test_the_options_with_named_choices_are_typed_literal():
    found = {family: set(option_choices(cls)) for family, cls in FAMILIES.items()}
    for family, keys in EXPECTED.items():
        assert keys <= found[family], f"{family}: {sorted(keys - found[family])} lost their Literal type"
    assert option_choices(FAMILIES["srnn"])["shift"] == (1, -1)


@pytest.mark.parametrize("family, key, choices", LITERAL_OPTIONS)
def test_a_bad_choice_is_refused_naming_key_value_and_choices_by_the_parser_and_the_constructor(family, key, choices):
    named = f"model.family_args.{key} = {BAD!r}; choose one of {list(choices)}"
    with pytest.raises(ConfigError) as parsed:
        resolve_family_args(family, {key: BAD})
    assert str(parsed.value).startswith(named) and "\n" not in str(parsed.value)
    assert f"`ortholab list families --family {family}`" in str(parsed.value)
    with pytest.raises(ValueError) as built:  # ConfigError is a ValueError: a library call gets the same line
        FAMILIES[family](2, 4, **{key: BAD})
    assert isinstance(built.value, ConfigError) and str(built.value).startswith(named)
    assert "\n" not in str(built.value)


@pytest.mark.parametrize("family, key, choices", LITERAL_OPTIONS)
def test_every_choice_is_accepted_by_the_parser_and_the_constructor(family, key, choices):
    for choice in choices:
        assert resolve_family_args(family, {key: choice})[key] == choice
        FAMILIES[family](2, 4, **{key: choice})


@pytest.mark.parametrize("family, key, choices", [case for case in LITERAL_OPTIONS if case[0] in onn.LAYERS])
def test_the_nn_layers_refuse_a_bad_choice_with_a_value_error_naming_the_option(family, key, choices):
    with pytest.raises(ValueError, match=rf"family_args\.{key} = '{BAD}'; choose one of"):
        onn.LAYERS[family](3, 4, **{key: BAD})


def test_a_value_of_another_type_is_no_choice():
    for value in (True, 1.0, "1"):  # True == 1 and 1.0 == 1, but neither is the choice 1
        with pytest.raises(ConfigError, match=rf"model\.family_args\.shift = {value!r}; choose one of \[1, -1\]"):
            resolve_family_args("srnn", {"shift": value})
        with pytest.raises(ConfigError, match="shift"):
            FAMILIES["srnn"](2, 4, shift=value)
    with pytest.raises(ConfigError, match=r"model\.family_args\.init = 3; choose one of \['henaff', 'zeros'\]"):
        FAMILIES["scornn"](2, 4, init=3)


def test_the_options_table_and_its_json_show_the_choices():
    table = describe_options("scurnn")
    assert "'left' | 'right'" in table and "'henaff' | 'henaff_2pi' | 'zeros'" in table
    assert "1 | -1" in describe_options("srnn")
    rows = {row["key"]: row for row in family_options_rows("exprnn")}
    assert rows["model.family_args.base_side"]["choices"] == ["right", "left"]
    assert rows["model.family_args.base_side"]["type"] == "'right' | 'left'"
    assert "choices" not in rows["model.family_args.rebase_every"]


def test_the_building_blocks_check_their_choices_naming_themselves():
    from ortholab.models.cayley import ScaledCayley
    from ortholab.models.matrix_exp import initial_skew
    from ortholab.models.pointwise_recurrence import pointwise_recurrence
    from ortholab.models.sequence import SequenceModel
    from ortholab.models.shift_recurrence import shift_relu_recurrence
    from ortholab.models.unitary import ComplexScaledCayley

    u, h0 = torch.zeros(2, 1, 3), torch.zeros(1, 3)
    calls = [
        (lambda: ComplexScaledCayley(4, d_side="up"), r"ComplexScaledCayley: d_side = 'up'; choose one of"),
        (lambda: ScaledCayley(4, 1, init="glorot"), r"ScaledCayley: init = 'glorot'; choose one of"),
        (lambda: initial_skew(4, "glorot"), r"initial_skew: init = 'glorot'; choose one of \['henaff'"),
        (lambda: pointwise_recurrence(u, torch.eye(3), h0, "relu"), r"pointwise_recurrence: activation = 'relu'"),
        (lambda: shift_relu_recurrence(u, h0, 2), r"shift_relu_recurrence: shift = 2; choose one of \[1, -1\]"),
        (lambda: SequenceModel(FAMILIES["rnn"](2, 3), 1, readout="first"), r"SequenceModel: readout = 'first'"),
    ]
    for call, match in calls:
        with pytest.raises(ValueError, match=match):
            call()


def test_the_helper_reads_literals_through_aliases_optional_and_future_annotations():
    assert literal_choices(Literal["a", "b"]) == ("a", "b")
    assert literal_choices(Optional[Literal["a"]]) == ("a", None)
    assert literal_choices(int) is None and literal_choices(int | Literal["auto"]) is None

    @checks_choices(key_prefix="f: ")
    def f(x: int, how: "Literal['up', 'down']" = "up", maybe: Optional[Literal["a"]] = None) -> str:
        return how

    assert f(1, "down") == "down" and f(1, maybe="a") == "up"
    with pytest.raises(ConfigError, match=r"^f: how = 'sideways'; choose one of \['up', 'down'\]"):
        f(1, how="sideways")
    with pytest.raises(TypeError):  # a call that does not fit the signature keeps Python's own error
        f()
    check_choices(f, {"how": "up", "unrelated": object()})
    assert inspect.signature(f).parameters["how"].default == "up"  # the decorator keeps the signature


def _module_constants(tree: ast.Module) -> set[str]:
    """Module-level names bound to a literal tuple, list or set of constants: hand-written lists of choices."""
    names = set()
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, (ast.Tuple, ast.List, ast.Set))
            and all(isinstance(element, ast.Constant) for element in node.value.elts)
        ):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def test_no_hand_written_choice_check_is_left_in_models():
    """`if option not in ("a", "b"):` (or a module tuple of them) on a function's parameter: the Literal in the
    signature says it once, and models/choices.py checks it."""
    found = []
    for path in sorted(MODELS.glob("*.py")):
        tree = ast.parse(path.read_text())
        constants = _module_constants(tree)
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = {a.arg for a in function.args.args + function.args.kwonlyargs}
            for node in ast.walk(function):
                if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id in params):
                    continue
                for op, right in zip(node.ops, node.comparators):
                    literal = isinstance(right, (ast.Tuple, ast.List, ast.Set)) and all(
                        isinstance(element, ast.Constant) for element in right.elts
                    )
                    if isinstance(op, (ast.In, ast.NotIn)) and (
                        literal or (isinstance(right, ast.Name) and right.id in constants)
                    ):
                        found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    assert not found, f"hand-written choice checks left: {found}"


def test_the_r_transformer_does_not_import_the_registry_that_imports_it():
    source = (MODELS / "rtransformer.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            assert node.module != "ortholab.models", f"rtransformer.py:{node.lineno} imports the package registry"
        if isinstance(node, ast.Import):
            assert all(alias.name != "ortholab.models" for alias in node.names)
    rtransformer = importlib.import_module("ortholab.models.rtransformer").RTransformer
    assert set(rtransformer.cell_families) == set(FAMILIES) - {"rtransformer"}
    with pytest.raises(ConfigError, match=r"model\.family_args\.cell = 'rtransformer' is not a recurrent family"):
        FAMILIES["rtransformer"](2, 8, cell="rtransformer", levels=1, heads=2)


def test_a_refused_choice_close_to_one_suggests_it():
    """`--model.input_adapter embeding` named the choices but not the near one, as misspelt keys and families do."""
    from ortholab.models.choices import choice_error

    said = str(choice_error("model.input_adapter", "embeding", ("default", "embedding", "linear")))
    choices = "['default', 'embedding', 'linear']"
    assert said == f"model.input_adapter = 'embeding'; choose one of {choices}; did you mean 'embedding'?"
    assert "did you mean" not in str(choice_error("model.family_args.shift", 2, (1, -1)))
    assert "did you mean" not in str(choice_error("launch: schedule", "zzz", ("persistent", "per_step")))
