"""EURNN: h_t = sigma_eps(U x_t + W h_{t-1}, b) with the unitary W = D F_L ... F_1, each F_k a layer of 2x2
complex Givens rotations on disjoint pairs of units (Jing et al. 2017, "Tunable Efficient Unitary Neural
Networks (EUNN) and their application to RNNs").

D = diag(e^{i w}). The layers:
- tunable style, capacity L: L layers alternating the pairs (0, 1), (2, 3), ... and (1, 2), (3, 4), ...;
- FFT style: ceil(log2 n) butterfly layers pairing i with i + s for the strides s = n/2, ..., 2, 1 (the
  official code's order), (i // s) even.
One angle th and one phase phi per rotation on the pair (i, j), which maps (h_i, h_j) by
- 'code' (default): [[cos th, -e^{i phi} sin th], [sin th, e^{i phi} cos th]], the phase on the pair's second
  input, as the official code (jingli9111/EUNN-tensorflow, EUNN.py) builds its cos/sin lists;
- 'paper': [[e^{i phi} cos th, -e^{i phi} sin th], [sin th, cos th]], the paper's matrix as printed,
  the phase on an output.
Both are unitary, but with the phase on an output some phases duplicate others (those of the last layer act
like D's): at L = n the paper's form reaches only n^2 - (n - 1) dimensions of U(n), the code's all n^2
(tests/test_eurnn.py checks the Jacobian's rank).
A layer is applied as y = c1 * x + c2 * x[partner] (elementwise, partner swapping each pair): one gather and
two products per layer and step, with the shared BPTT of models/operator_recurrence.py. The alternative, W formed
once per pass from the layers and one (2n x 2n) real product per step (models/complex_recurrence.py), costs
~n^2 per step against ~(L + 3) n. Measured (forward + backward, T = 50, batch 128, one thread, ms):
    tunable L = 2:  n = 128: layers 76 / dense 59;  n = 256: 157 / 189;  n = 512: 284 / 563
    tunable L = 4, n = 512: 417 / 590;  FFT (9 layers), n = 512: 653 / 560;  FFT (10), n = 1024: 1476 / 2276
so `recurrence='auto'` takes the layers when n > 52 (L + 3), the dense W otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
from torch import nn

from ortholab.models.base import INTERLEAVED_STATE, ConfigError
from ortholab.models.choices import checks_choices
from ortholab.models.compiled import kernel, supported
from ortholab.models.complex_recurrence import complex_modrelu_recurrence, eunn_modrelu
from ortholab.models.operator_recurrence import (
    FactoredUnitaryLayer,
    gather_units,
    interleaved_to_planar,
    operator_recurrence_features,
    planar_to_interleaved,
)

LAYERS_FROM_WIDTH = 52  # auto: the layers when n > 52 (L + 3), the measured crossover above
# the code's modReLU eps (eunn.py:16) until ba78a68 / 4ef928d (2018-11-20) raised it to 1e-3, then 1e-2: the scoRNN
# (ICML 2018) and scuRNN (AAAI 2019, submitted before that) papers ran the 1e-5 version
CODE_MODRELU_EPS = 1e-5


def tunable_pairs(n: int, capacity: int) -> list[list[tuple[int, int]]]:
    """The L = capacity layers of the tunable style: (0, 1), (2, 3), ... then (1, 2), (3, 4), ..., alternating."""
    return [[(i, i + 1) for i in range(k % 2, n - 1, 2)] for k in range(capacity)]


def fft_pairs(n: int) -> list[list[tuple[int, int]]]:
    """The ceil(log2 n) butterfly layers: stride s = 2^(L-1), ..., 2, 1, pairing i with i + s where (i // s) is even."""
    strides = [1 << k for k in range(math.ceil(math.log2(n)) if n > 1 else 0)][::-1]
    return [[(i, i + s) for i in range(n - s) if (i // s) % 2 == 0] for s in strides]


def layer_indices(layers: list[list[tuple[int, int]]], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(partner (L, n), source (L, n)) for rotations numbered layer by layer in pair order (R rotations in all).

    partner[k, i] is the unit paired with i in layer k (i itself if untouched). source[k, i] picks the
    coefficient of unit i from a value table [first-of-pair values (R), second-of-pair values (R), untouched]:
    r for the first unit of rotation r, R + r for its second, 2R for an untouched unit.
    """
    total = sum(len(pairs) for pairs in layers)
    partner = [list(range(n)) for _ in layers]
    source = [[2 * total] * n for _ in layers]
    r = 0
    for k, pairs in enumerate(layers):
        for i, j in pairs:
            partner[k][i], partner[k][j] = j, i
            source[k][i], source[k][j] = r, total + r
            r += 1
    return (
        torch.tensor(partner, dtype=torch.long).view(len(layers), n),
        torch.tensor(source, dtype=torch.long).view(len(layers), n),
    )


@dataclass(frozen=True)
class GivensLayers:
    """W = D F_L ... F_1 on rows, F_k x = c1_k * x + c2_k * x[partner_k], from the rotations' angles and phases.

    Factors: c1, c2 (L, n), d = e^{i w} (n,), and their conjugates for the adjoint. phase_on_input: the code's
    rotation (phase on the pair's second input) rather than the paper's printed one (phase on the first output).
    """

    partner: torch.Tensor
    source: torch.Tensor
    phase_on_input: bool = True

    def prepare(self, theta: torch.Tensor, phi: torch.Tensor, omega: torch.Tensor) -> tuple:
        cos, sin = torch.cos(theta), torch.sin(theta)
        phase = torch.polar(torch.ones_like(phi), phi)
        real_cos, real_sin = torch.complex(cos, torch.zeros_like(cos)), torch.complex(sin, torch.zeros_like(sin))
        one, zero = torch.complex(cos.new_ones(1), cos.new_zeros(1)), torch.complex(cos.new_zeros(1), cos.new_zeros(1))
        if self.phase_on_input:  # h_i' = cos h_i - e^{i phi} sin h_j, h_j' = sin h_i + e^{i phi} cos h_j
            first, second = real_cos, phase * cos
        else:  # the paper's: h_i' = e^{i phi} (cos h_i - sin h_j), h_j' = sin h_i + cos h_j
            first, second = phase * cos, real_cos
        c1 = torch.cat([first, second, one])[self.source]  # untouched units keep h
        c2 = torch.cat([-phase * sin, real_sin, zero])[self.source]
        d = torch.polar(torch.ones_like(omega), omega)
        return c1, c2, d, *(f.conj().resolve_conj() for f in (c1, c2, d))

    def apply(
        self,
        x: torch.Tensor,
        factors: tuple,
        plus: torch.Tensor | None = None,
        tape: list | None = None,
        out: torch.Tensor | None = None,
        conjugate: bool = False,
    ) -> torch.Tensor:
        c1, c2, d = factors[3:] if conjugate else factors[:3]  # conj(W) = conj(D) conj(F_L) ... conj(F_1)
        for k in range(c1.shape[0]):
            swapped = gather_units(x, self.partner[k])
            if tape is not None:
                tape.append((x, swapped))
            x = torch.addcmul(x * c1[k], swapped, c2[k])  # F_k
        if tape is not None:
            tape.append(x)
        return torch.mul(x, d, out=out) if plus is None else torch.addcmul(plus, x, d, out=out)  # D (+ U x_t)

    def gradient_buffers(self, factors: tuple, batch: int) -> list[torch.Tensor]:
        return [f.new_zeros(*f.shape[:-1], batch, f.shape[-1]) for f in factors[:3]]  # per batch row

    def factor_gradients(self, buffers: list[torch.Tensor]) -> list[torch.Tensor]:
        return [b.sum(dim=-2) for b in buffers]

    def adjoint(
        self, g: torch.Tensor, factors: tuple, tape: list | None = None, grads: list | None = None
    ) -> torch.Tensor:
        c1_conj, c2_conj, d_conj = factors[3:]  # F_k^H g = conj(c1) g + (conj(c2) g)[partner]
        if tape is not None:  # y = c * x elementwise: dL/dc = conj(x) G, per batch row (tape: conj(x))
            grads[2].addcmul_(tape[-1], g)
        g = g * d_conj
        for k in range(c1_conj.shape[0] - 1, -1, -1):
            if tape is not None:
                x_conj, swapped_conj = tape[k]
                grads[0][k].addcmul_(x_conj, g)
                grads[1][k].addcmul_(swapped_conj, g)
            g = torch.addcmul(gather_units(g * c2_conj[k], self.partner[k]), g, c1_conj[k])
        return g


class EURNN(FactoredUnitaryLayer):
    """Efficient unitary RNN: n complex units, real readout of their real and imaginary parts (output_size = 2n).

    The readout's features interleave h's real and imaginary parts as models/operator_recurrence.py lays them out.

    style: 'tunable' (capacity L layers, default L = 2) or 'fft' (ceil(log2 n) layers; capacity is ignored).
    capacity: L, the number of rotation layers of the tunable style.
    rotation: 'code' (the official code's 2x2 rotation, default) or 'paper' (the paper's as printed); see above.
    recurrence: 'layers' (the rotation layers at every step: on the CPU the compiled loops of
        models/givens_kernels.py, elsewhere models/operator_recurrence.py's BPTT),
        'dense' (W formed once per pass from the layers, then models/complex_recurrence.py) or 'auto' (the layers
        when n > 52 (L + 3), as measured above; both give the same values and gradients).
    modrelu_eps: eps of the code's modReLU below (default 1e-5, the code the papers compared against).
    Initialisation as the official code (jingli9111/EUNN-tensorflow): angles, phases and D's phases
    ~ U(-pi, pi), input weights [Re U; Im U] (2n, m) ~ U(-0.01, 0.01), modReLU bias b = 0, zero initial state
    (fixed). The nonlinearity is the code's modReLU, z / (|z| + eps) relu(|z| + eps + b) (eunn.py:15-19), with
    modrelu_eps = 1e-5 by default: the code until 2018-11-20 (then commit ba78a68 made it 1e-3 and 4ef928d 1e-2,
    both "finally fixed the bug", after 4fc21f4 "fix bug for nan problem in mnist task"), so the version the scoRNN
    and scuRNN papers compared against; 0.01 is the code's head. (The other complex families take scuRNN eq. (5),
    eps inside a root: not the same function for |z| below ~sqrt(eps).)
    The official code reads out only Re h from a complex cell; here, as the other complex families, Re h and Im h.
    Parameter groups: `recurrent` (angles, phases, D's phases), `other` (U, b).
    """

    layer_doc = (
        f"Efficient unitary RNN, Givens-rotation layers (Jing et al. 2017). {INTERLEAVED_STATE} "
        "Groups: recurrent, other. h0 = 0."
    )

    @checks_choices
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        style: Literal["tunable", "fft"] = "tunable",
        capacity: int = 2,
        rotation: Literal["code", "paper"] = "code",
        recurrence: Literal["auto", "dense", "layers"] = "auto",
        modrelu_eps: float = CODE_MODRELU_EPS,
    ):
        super().__init__(input_size, hidden_size)
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(
                f"model.family_args.capacity = {capacity!r} must be a positive int (the number of "
                f"rotation layers of the tunable style; the papers use 2)"
            )
        if isinstance(modrelu_eps, bool) or not isinstance(modrelu_eps, (int, float)) or not modrelu_eps > 0:
            raise ConfigError(
                f"model.family_args.modrelu_eps = {modrelu_eps!r} must be a positive number: the "
                f"modReLU divides z by |z| + eps, and z = 0 where h = 0 meets a zero input; 1.0e-5 "
                f"(the code the papers ran) or 1.0e-2 (the code's head)"
            )
        n = hidden_size
        self.output_size = 2 * n
        self.style, self.capacity, self.rotation = style, capacity, rotation
        self.modrelu = eunn_modrelu(float(modrelu_eps))
        layers = tunable_pairs(n, capacity) if style == "tunable" else fft_pairs(n)
        if recurrence == "auto":
            recurrence = "layers" if n > LAYERS_FROM_WIDTH * (len(layers) + 3) else "dense"
        self.recurrence = recurrence
        rotations = sum(len(pairs) for pairs in layers)
        partner, source = layer_indices(layers, n)
        self.register_buffer("partner", partner, persistent=False)  # fixed by (n, style, capacity)
        self.register_buffer("source", source, persistent=False)
        self.theta = nn.Parameter(torch.empty(rotations).uniform_(-math.pi, math.pi))  # rotation angles
        self.phi = nn.Parameter(torch.empty(rotations).uniform_(-math.pi, math.pi))  # rotation phases
        self.omega = nn.Parameter(torch.empty(n).uniform_(-math.pi, math.pi))  # D = diag(e^{i w})
        self.input_weight = nn.Parameter(torch.empty(2 * n, input_size).uniform_(-0.01, 0.01))
        self.bias = nn.Parameter(torch.zeros(n))  # modReLU bias, one per complex unit
        self.register_buffer("h0", torch.zeros(2 * n))  # h0 (interleaved), fixed at zero

    def operator(self) -> GivensLayers:
        return GivensLayers(self.partner, self.source, phase_on_input=self.rotation == "code")

    def recurrent_params(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.theta, self.phi, self.omega

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"recurrent": list(self.recurrent_params()), "other": [self.input_weight, self.bias]}

    def recurrence_for(self, u: torch.Tensor):
        """On the CPU, the compiled loops of models/givens_kernels.py (2-3x faster there); else the torch BPTT."""
        if supported(u):
            recurrence = kernel("givens_kernels", "givens_recurrence_features")
        else:
            recurrence = operator_recurrence_features
        return partial(recurrence, modrelu=self.modrelu)

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.recurrence == "dense":
            w = self.recurrent_matrix()  # formed once per pass from the layers, differentiably
            u = torch.matmul(x.transpose(0, 1), self.input_weight.t())  # (T, B, 2n): [Re | Im] U x_t, all steps
            h0 = interleaved_to_planar(self.h0 if initial_state is None else initial_state).expand(x.shape[0], -1)
            offsets = None if state_offsets is None else interleaved_to_planar(state_offsets.transpose(0, 1))
            h = complex_modrelu_recurrence(u, w.real, w.imag, self.bias, h0, offsets, modrelu=self.modrelu)
            return planar_to_interleaved(h).transpose(0, 1)
        return super().forward(x, state_offsets, initial_state)  # the layers at every step
