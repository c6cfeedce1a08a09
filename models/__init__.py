"""Recurrent families by name. A new family is one file in models/ plus one line here."""

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

__all__ = ["FAMILIES", "ConfigError", "RecurrentLayer", "SequenceModel"]
