"""Recurrent families by name. A new family is one file in models/ plus one line here."""
from models.base import ConfigError, RecurrentLayer
from models.eurnn import EURNN
from models.exprnn import ExpRNN
from models.fcurnn import FullCapacityURNN
from models.gated import GRU, LSTM, RNN
from models.nnrnn import NNRNN
from models.nru import NRU
from models.ornn import ORNN
from models.rtransformer import RTransformer
from models.scornn import ScoRNN
from models.scurnn import ScuRNN
from models.sequence import SequenceModel
from models.srnn import SRNN
from models.urnn import URNN

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
}

__all__ = ["FAMILIES", "ConfigError", "RecurrentLayer", "SequenceModel"]
