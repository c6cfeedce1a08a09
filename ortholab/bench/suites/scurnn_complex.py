"""`ortholab bench --suite scurnn-complex`: scuRNN's real [Re | Im] layout against torch's complex dtypes."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial

import torch

from ortholab.bench.families import machine
from ortholab.bench.suites.common import SuiteResult, alternating_medians, time_fwd_bwd
from ortholab.bench.suites.complex_dtype_recurrence import ComplexDtypeScuRNN
from ortholab.bench.suites.settings import ScurnnComplex
from ortholab.models.scurnn import ScuRNN

REAL, COMPLEX = "scurnn [Re | Im] layout", "scurnn complex dtypes"


def run(settings: ScurnnComplex) -> SuiteResult:
    torch.manual_seed(0)
    x = torch.rand(settings.batch, settings.seq_len, 1, device=settings.device)
    layer = ScuRNN(1, settings.hidden).to(settings.device)
    models = {REAL: layer, COMPLEX: ComplexDtypeScuRNN(layer)}  # the same parameters, two implementations
    seconds = alternating_medians(models, partial(time_fwd_bwd, x=x, device=settings.device), settings.repeats)
    result = SuiteResult("scurnn-complex", machine(), asdict(settings), seconds, {})
    result.ratio(REAL, COMPLEX)
    return result
