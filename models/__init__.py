"""Recurrent families by name. A new family is one file in models/ plus one line here."""
from models.base import ConfigError, RecurrentLayer
from models.gated import GRU, LSTM, RNN
from models.scornn import ScoRNN
from models.scurnn import ScuRNN
from models.sequence import SequenceModel

FAMILIES: dict[str, type[RecurrentLayer]] = {
    "scornn": ScoRNN,
    "scurnn": ScuRNN,
    "lstm": LSTM,
    "gru": GRU,
    "rnn": RNN,
}

__all__ = ["FAMILIES", "ConfigError", "RecurrentLayer", "SequenceModel"]
