"""Recurrent families by name. A new family is one file in models/ plus one line here; a family of your own, outside
this package, is registered with register_family from a module named by $ORTHOLAB_CONFIG_MODULES."""

import inspect

from ortholab.models.base import ConfigError, RecurrentLayer
from ortholab.models.eurnn import EURNN
from ortholab.models.exprnn import ExpRNN
from ortholab.models.fcurnn import FullCapacityURNN
from ortholab.models.gated import GRU, LSTM, RNN
from ortholab.models.lru import LRU
from ortholab.models.nnrnn import NNRNN
from ortholab.models.nru import NRU
from ortholab.models.ornn import ORNN
from ortholab.models.rtransformer import RTransformer
from ortholab.models.s4d import S4D
from ortholab.models.scornn import ScoRNN
from ortholab.models.scurnn import ScuRNN
from ortholab.models.sequence import SequenceModel
from ortholab.models.srnn import SRNN
from ortholab.models.urnn import URNN

FAMILIES: dict[str, type[RecurrentLayer]] = {
    "scornn": ScoRNN,
    "scurnn": ScuRNN,
    "lstm": LSTM,
    "gru": GRU,
    "rnn": RNN,
    "ornn": ORNN,
    "srnn": SRNN,
    "exprnn": ExpRNN,
    "nnrnn": NNRNN,
    "urnn": URNN,
    "eurnn": EURNN,
    "fcurnn": FullCapacityURNN,
    "nru": NRU,
    "rtransformer": RTransformer,
    "lru": LRU,
    "s4d": S4D,
}
# the R-Transformer runs any other family inside its windows: handed the registry here, it need not import it
RTransformer.cell_families = {name: cls for name, cls in FAMILIES.items() if cls is not RTransformer}


def register_family(name: str, cls: type[RecurrentLayer]) -> None:
    """Train `cls` as `model.family: name`, as OrthoLab's own families (call it in a module named by
    $ORTHOLAB_CONFIG_MODULES, which every training and listing command imports first)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a short identifier such as 'mytanh', not {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, RecurrentLayer)):
        raise TypeError(f"cls must be a subclass of ortholab.models.RecurrentLayer, as every family is; got {cls!r}")
    try:
        inspect.signature(cls).bind(1, 2)  # built as cls(input_size, hidden_size, **model.family_args)
    except TypeError:
        required = [
            key
            for key, p in inspect.signature(cls).parameters.items()
            if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ][2:]
        if required and list(inspect.signature(cls).parameters)[:2] == ["input_size", "hidden_size"]:
            raise TypeError(
                f"cls {cls.__name__}'s option {required[0]!r} has no default: give every option one (the paper's "
                f"value), as `ortholab list families` and a config without it build the family"
            ) from None
        raise TypeError(
            f"cls {cls.__name__} must take (input_size, hidden_size, **options) as every family does"
        ) from None
    if FAMILIES.get(name, cls) is not cls:
        raise ValueError(f"name {name!r} is OrthoLab's {FAMILIES[name].__name__} already; choose another")
    taken = next((other for other, known in FAMILIES.items() if known.__name__ == cls.__name__ and other != name), None)
    if taken is not None:  # ortholab.nn names each family's layer after its class: onn.GRU would become this one
        raise ValueError(
            f"cls is named {cls.__name__}, as family {taken!r}'s class, and ortholab.nn names each layer after its "
            f"class; rename the class"
        )
    FAMILIES[name] = RTransformer.cell_families[name] = cls


__all__ = ["FAMILIES", "ConfigError", "RecurrentLayer", "SequenceModel", "register_family"]
