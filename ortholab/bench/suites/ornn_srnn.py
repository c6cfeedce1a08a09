"""`ortholab bench --suite ornn-srnn`: the oRNN and the SRNN with the paper's pMNIST f_r, each against
nn.RNN(relu) at its hidden size and nn.LSTM at the same parameter budget (pixel MNIST: 1 input, 10 classes)."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial

import torch

from ortholab.bench.families import BUDGETS, CLASSES, machine
from ortholab.bench.suites.common import SuiteResult, alternating_medians, time_fwd_bwd
from ortholab.bench.suites.settings import OrnnSrnn
from ortholab.errors import ConfigError
from ortholab.models import FAMILIES, SequenceModel
from ortholab.models.sizing import hidden_size_for_budget, parameter_count


def _model(family: str, n: int, device: str, **options) -> SequenceModel:
    return SequenceModel(FAMILIES[family](1, n, **options), CLASSES, readout="last_step").to(device)


def run(settings: OrnnSrnn) -> SuiteResult:
    if settings.size not in BUDGETS:
        raise ConfigError(f"--sizes {settings.size}: choose one of {sorted(BUDGETS)}")
    budget, device = BUDGETS[settings.size], settings.device
    torch.manual_seed(0)
    x = torch.rand(settings.batch, settings.seq_len, 1, device=device)
    lstm_n = hidden_size_for_budget("lstm", budget, 1, CLASSES)
    families = {"ornn": {}, "srnn": {"hyper": settings.srnn_hyper, "n_layers": settings.srnn_layers}}
    models, notes, pairs = {}, [], []
    for family, options in families.items():
        n = hidden_size_for_budget(family, budget, 1, CLASSES, options)
        mine, rnn = f"{family} n={n}", f"nn.RNN(relu) n={n}"
        models[mine] = _model(family, n, device, **options)
        models[rnn] = _model("rnn", n, device, nonlinearity="relu")
        pairs.append((family, mine, rnn))
        notes.append(
            f"{family}: {parameter_count(family, n, 1, CLASSES, options):,} parameters"
            + (f" ({', '.join(f'{k} {v}' for k, v in options.items())})" if options else " (m = n)")
        )
    lstm = f"nn.LSTM n={lstm_n}"
    models[lstm] = _model("lstm", lstm_n, device)
    notes.append(f"nn.LSTM: {parameter_count('lstm', lstm_n, 1, CLASSES):,} parameters")
    seconds = alternating_medians(models, partial(time_fwd_bwd, x=x, device=device), settings.repeats)
    result = SuiteResult("ornn-srnn", machine(), asdict(settings), seconds, {}, notes)
    for family, mine, rnn in pairs:
        result.ratio(mine, rnn, f"{family} / nn.RNN(relu)")
        result.ratio(mine, lstm, f"{family} / nn.LSTM")
    return result
