"""Restricted-capacity uRNN: h_t = sigma_eps(U x_t + W h_{t-1}, b) with the unitary
W = D3 R2 F^-1 D2 Pi R1 F D1 (Arjovsky, Shah, Bengio 2016, "Unitary evolution recurrent neural networks").

D_k = diag(e^{i w_k}) (trainable phases), R_k = I - 2 v_k v_k^H / |v_k|^2 (complex Householder reflections,
trainable v_k stored as real and imaginary parts), F the unitary DFT (torch.fft with norm="ortho"; the SRNN
port's unnormalised FFT with a 1/n inverse forms the same W), Pi a fixed random permutation. 7n recurrent
parameters (Wisdom et al. 2016). W is applied by its factors at every step (O(n log n)), never as a matrix: on the
CPU by the compiled kernels of models/urnn_kernels.py, elsewhere by models/operator_recurrence.py's BPTT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ortholab.models.base import INTERLEAVED_STATE
from ortholab.models.compiled import kernel, supported
from ortholab.models.operator_recurrence import FactoredUnitaryLayer, gather_units, operator_recurrence_features


def fft(x: torch.Tensor) -> torch.Tensor:
    """F x for every row x: the unitary DFT."""
    return torch.fft.fft(x, norm="ortho")


def ifft(x: torch.Tensor) -> torch.Tensor:
    """F^-1 x = F^H x for every row x."""
    return torch.fft.ifft(x, norm="ortho")


def reflect(
    x: torch.Tensor, v: torch.Tensor, c: torch.Tensor, inplace: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(R x, a) for every row x: R x = x - 2 v (v^H x) / |v|^2 = x - a v with a = c^T x, c = 2 conj(v) / |v|^2."""
    a = x @ c.unsqueeze(1)
    if inplace:
        return x.addmm_(a, v.unsqueeze(0), alpha=-1), a
    return torch.addmm(x, a, v.unsqueeze(0), alpha=-1), a


@dataclass(frozen=True)
class RestrictedUnitary:
    """W = D3 R2 F^-1 D2 Pi R1 F D1 on rows, from phases (3, n) and reflection vectors (2, n) (real, imaginary).

    Factors: d = e^{i w} (3, n), v (2, n), c = 2 conj(v) / |v|^2 (2, n), and their conjugates for the adjoint
    (R is Hermitian: R^H g = g - conj(c) (v^H g)). `permutation` p: (Pi x)_k = x_{p[k]}; `inverse` is p^-1.
    """

    permutation: torch.Tensor
    inverse: torch.Tensor

    def prepare(self, phases: torch.Tensor, reflection_real: torch.Tensor, reflection_imag: torch.Tensor) -> tuple:
        d = torch.polar(torch.ones_like(phases), phases)  # D_k = diag(e^{i w_k})
        v = torch.complex(reflection_real, reflection_imag)
        c = 2 * v.conj() / v.real.square().add(v.imag.square()).sum(dim=1, keepdim=True)  # R = I - 2 v v^H / |v|^2
        return d, v, c, *(f.conj().resolve_conj() for f in (d, v, c))

    def apply(
        self,
        x: torch.Tensor,
        factors: tuple,
        plus: torch.Tensor | None = None,
        tape: list | None = None,
        out: torch.Tensor | None = None,
        conjugate: bool = False,
    ) -> torch.Tensor:
        d, v, c = factors[3:] if conjugate else factors[:3]
        # conj(W) = conj(D3) conj(R2) F conj(D2) Pi conj(R1) F^-1 conj(D1): the unitary DFT is symmetric, conj(F) = F^-1
        forward, inverse = (ifft, fft) if conjugate else (fft, ifft)
        inplace = tape is None and not torch.is_grad_enabled()  # no factor input is kept: reuse the buffers
        x1 = forward(x * d[0])  # F D1 h
        x2, a1 = reflect(x1, v[0], c[0], inplace)  # R1
        x3 = gather_units(x2, self.permutation)  # Pi
        x4 = inverse(x3.mul_(d[1]) if inplace else x3 * d[1])  # F^-1 D2
        x5, a2 = reflect(x4, v[1], c[1], inplace)  # R2
        if tape is not None:
            tape.extend((x, x1, a1, x3, x4, a2, x5))
        return torch.mul(x5, d[2], out=out) if plus is None else torch.addcmul(plus, x5, d[2], out=out)  # D3 (+ U x_t)

    def gradient_buffers(self, factors: tuple, batch: int) -> list[torch.Tensor]:
        d, v, c = factors[:3]
        return [d.new_zeros(d.shape[0], batch, d.shape[1]), torch.zeros_like(v), torch.zeros_like(c)]

    def factor_gradients(self, buffers: list[torch.Tensor]) -> list[torch.Tensor]:
        return [buffers[0].sum(dim=1), buffers[1], buffers[2]]  # the phases' per-row sums over the batch

    def adjoint(
        self, g: torch.Tensor, factors: tuple, tape: list | None = None, grads: list | None = None
    ) -> torch.Tensor:
        d_conj, v_conj, c_conj = factors[3:]  # W^H = D1^H F^-1 R1 Pi^T D2^H F R2 D3^H
        if tape is not None:  # the tape holds conj(x) of every factor input x (and conj(a) of the reflections)
            x, x1, a1, x3, x4, a2, x5 = tape
            grad_d, grad_v, grad_c = grads
            grad_d[2].addcmul_(x5, g)  # y = d * x: dL/dd = conj(x) G per batch row
        g = g * d_conj[2]  # a new buffer: the steps below work in place
        q = g @ v_conj[1].unsqueeze(1)  # v^H g per row
        if tape is not None:  # y = x - a v, a = c^T x: dL/dv = -a^H G, dL/dc = -x^H (G conj(v)) = -conj(x)^T q
            grad_v[1] -= (a2.mT @ g).squeeze(0)
            grad_c[1] -= (q.mT @ x4).squeeze(0)
        g = fft(g.addmm_(q, c_conj[1].unsqueeze(0), alpha=-1))
        if tape is not None:
            grad_d[1].addcmul_(x3, g)
        g = gather_units(g.mul_(d_conj[1]), self.inverse)
        q = g @ v_conj[0].unsqueeze(1)
        if tape is not None:
            grad_v[0] -= (a1.mT @ g).squeeze(0)
            grad_c[0] -= (q.mT @ x1).squeeze(0)
        g = ifft(g.addmm_(q, c_conj[0].unsqueeze(0), alpha=-1))
        if tape is not None:
            grad_d[0].addcmul_(x, g)
        return g.mul_(d_conj[0])


class URNN(FactoredUnitaryLayer):
    """Unitary evolution RNN (Arjovsky): n complex units, readout of their real and imaginary parts (output_size = 2n).

    The readout's features interleave h's real and imaginary parts as models/operator_recurrence.py lays them out.

    Initialisation as the paper's Section "Initialization" and the SRNN repo's port: phases w_k ~ U(-pi, pi),
    reflection vectors' real and imaginary parts ~ U(-1, 1), modReLU bias b = 0, input U a real (2n, m)
    Glorot-uniform matrix [Re U; Im U] (the port's; Arjovsky's code draws Re U and Im U as two (m, n) Glorot).
    Pi is drawn from the global generator when the layer is built (so by the run's seed) and kept as a
    persistent buffer: a checkpoint restores it. The initial state h0 is trainable, as in Arjovsky's Theano code
    (the papers' budgets, ~69k at n = 2170, count it), drawn ~ U(-sqrt(3/2n), sqrt(3/2n)) per real coordinate
    so that E|h0|^2 = 1 (the paper's draft and the port; the Theano code's range is sqrt(2) wider). The port
    instead draws a fresh, untrained h0 every forward pass, which makes evaluation non-deterministic.
    The nonlinearity is scuRNN eq. (5), z relu(r + b) / (r + eps), r = sqrt(|z|^2 + eps), eps = 1e-5: the
    approximate modReLU the scuRNN paper ascribes to the uRNN implementations (Arjovsky's code divides by
    |z| + 1e-5, the port by |z| + 1e-6, both without eps under the root).
    Parameter groups: `recurrent` (3n phases, 2 x 2n reflection coordinates: 7n), `other` (U, b, h0).
    """

    layer_doc = (
        f"Unitary evolution RNN (Arjovsky et al. 2016). {INTERLEAVED_STATE} "
        "Groups: recurrent, other (with the trained h0)."
    )

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        n = hidden_size
        self.output_size = 2 * n
        self.phases = nn.Parameter(torch.empty(3, n).uniform_(-math.pi, math.pi))  # w_1, w_2, w_3
        self.reflection_real = nn.Parameter(torch.empty(2, n).uniform_(-1.0, 1.0))  # Re v_1, Re v_2
        self.reflection_imag = nn.Parameter(torch.empty(2, n).uniform_(-1.0, 1.0))  # Im v_1, Im v_2
        self.register_buffer("permutation", torch.randperm(n))  # Pi, fixed; saved in checkpoints
        self.input_weight = nn.Parameter(nn.init.xavier_uniform_(torch.empty(2 * n, input_size)))
        self.bias = nn.Parameter(torch.zeros(n))  # modReLU bias, one per complex unit
        bound = math.sqrt(3.0 / (2 * n))  # E|h0|^2 = 2n bound^2 / 3 = 1
        self.h0 = nn.Parameter(torch.empty(2 * n).uniform_(-bound, bound))  # h0, interleaved

    def operator(self) -> RestrictedUnitary:
        return RestrictedUnitary(self.permutation, torch.argsort(self.permutation))

    def recurrent_params(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.phases, self.reflection_real, self.reflection_imag

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"recurrent": list(self.recurrent_params()), "other": [self.input_weight, self.bias, self.h0]}

    def recurrence_for(self, u: torch.Tensor):
        """On the CPU, the compiled kernels of models/urnn_kernels.py; else the torch BPTT."""
        if supported(u):
            return kernel("urnn_kernels", "urnn_recurrence_features")
        return operator_recurrence_features
