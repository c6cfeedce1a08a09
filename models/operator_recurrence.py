"""The complex modReLU recurrence h_t = sigma_eps(u_t + W h_{t-1}, b) when W is a product of cheap unitary
factors (uRNN: diagonals, FFTs, reflections, a permutation; EURNN: layers of Givens rotations), applied factor
by factor at every step instead of as a dense matrix, with a hand-written BPTT.

An operator provides
- `prepare(*params)`: its factors (a tuple of tensors), differentiable functions of the trainable parameters,
  formed once per pass;
- `apply(x, factors, plus=None, tape=None, out=None, conjugate=False)`: plus + W x for every row x of a complex
  (B, n) tensor; with `conjugate`, conj(W) x instead, and a list `tape` then records the input of every factor:
  the backward passes conj(h_{t-1}), so the tape holds the conjugated inputs its gradient sums need;
- `gradient_buffers(factors, batch)` and `factor_gradients(buffers)`: accumulators for dL/dfactor (per batch row
  where a factor acts elementwise, so each step adds in place and the batch is summed once, after the loop),
  and the gradients they hold, aligned with the first factors;
- `adjoint(g, factors, tape=None, grads=None)`: W^H g; with the tape of the same x it also adds
  dL/dfactor to the buffers `grads`, g being dL/d(W x).
Complex gradients follow PyTorch's convention, G = dL/dRe + i dL/dIm: through y = A x they pull back as
dL/dx = A^H G and dL/dA = G x^H, and through y = c * x (elementwise) as dL/dc = sum over the batch of G conj(x).
Complex states are rows (B, n) (torch.fft transforms the last dimension without copies), and the recurrence
takes and returns complex tensors: the layers form u = U x complex with no copy (`interleaved_input`) and read
out the hidden states as interleaved real features (Re h_0, Im h_0, Re h_1, ...), a view of the complex states
(the [Re h | Im h] layout of the dense complex families would copy every state, and its gradient, once more).

The forward loop keeps z_t = u_t + W h_{t-1} and h_t; the backward loop, from t = T - 1, recomputes sigma_eps's
r and s from z_t in a reused buffer (cheaper than keeping two more (T, B, n) arrays), forms dL/dz_t from the
carried dL/dh_t in z_t's place (so the backward holds z, h and dL/dh at its peak, and runs once per forward:
a second backward through the same graph is refused with an error saying so), applies W to h_{t-1} again with a
tape, and pulls dL/dz_t back by the adjoint factors, which add the factors' gradients on the way:
dL/dh_{t-1} = (direct) + W^H dL/dz_t. Autograd then carries the factors' gradients through `prepare` to the
parameters, once. (Forming sigma_eps's derivatives or the factors' gradients for all steps at once, outside the
loop, was slower here: arrays of all steps leave the cache, and the loop's adjoint pass would be done twice.)

sigma_eps is scuRNN eq. (5), h = z s(r), s(r) = relu(r + b) / (r + eps), r = sqrt(|z|^2 + eps), the
approximate modReLU of the uRNN implementations; its real 2x2 Jacobian per unit is s I + s'(r)/r z z^T with
s'(r) = (eps - b) / (r + eps)^2 where r + b > 0 (as models/complex_recurrence.py). `modrelu` (a `ModReLU` of
that module) puts the eps elsewhere: EURNN takes its code's z / (|z| + eps) relu(|z| + eps + b).
`offsets` (optional, (T, B, n)) are added to every h_t inside the recurrence; their gradient is the total
dL/dh_t, which the gradient-norm probe (scoRNN Figure 5) records. `FactoredUnitaryLayer` is the layer both
families build on: input projection, dense W for the analyses, and the recurrence.
"""

from __future__ import annotations

from typing import Protocol

import torch

from ortholab.models.backward_limits import refuse_create_graph, refuse_second_backward
from ortholab.models.base import RecurrentLayer
from ortholab.models.complex_recurrence import SCURNN_MODRELU, ModReLU


class UnitaryOperator(Protocol):
    def prepare(self, *params: torch.Tensor) -> tuple[torch.Tensor, ...]: ...

    def apply(
        self,
        x: torch.Tensor,
        factors: tuple,
        plus: torch.Tensor | None = None,
        tape: list | None = None,
        out: torch.Tensor | None = None,
        conjugate: bool = False,
    ) -> torch.Tensor: ...

    def gradient_buffers(self, factors: tuple, batch: int) -> list[torch.Tensor]: ...

    def factor_gradients(self, buffers: list[torch.Tensor]) -> list[torch.Tensor]: ...

    def adjoint(
        self, g: torch.Tensor, factors: tuple, tape: list | None = None, grads: list | None = None
    ) -> torch.Tensor: ...


def to_complex(x: torch.Tensor) -> torch.Tensor:
    """Interleaved (Re x_0, Im x_0, Re x_1, ...) (..., 2n) real -> (..., n) complex, a view (no copy)."""
    return torch.view_as_complex(x.unflatten(-1, (-1, 2)))


def to_real(z: torch.Tensor) -> torch.Tensor:
    """(..., n) complex -> interleaved (Re z_0, Im z_0, Re z_1, ...) (..., 2n) real, a view (no copy)."""
    return torch.view_as_real(z).flatten(-2)


def gradient_as_complex(g: torch.Tensor) -> torch.Tensor:
    """`to_complex` of an incoming gradient: a view where its strides allow one (a transposed (B, T, 2n) gradient
    does), else of a contiguous copy."""
    if g.stride(-1) != 1 or g.storage_offset() % 2 or any(stride % 2 for stride in g.stride()[:-1]):
        g = g.contiguous()
    return to_complex(g)


def planar_to_interleaved(x: torch.Tensor) -> torch.Tensor:
    """[Re | Im] (..., 2n) -> interleaved (Re_0, Im_0, Re_1, ...) (..., 2n), a copy."""
    return x.unflatten(-1, (2, -1)).transpose(-1, -2).flatten(-2)


def interleaved_to_planar(x: torch.Tensor) -> torch.Tensor:
    """Interleaved (Re_0, Im_0, Re_1, ...) (..., 2n) -> [Re | Im] (..., 2n), a copy."""
    return x.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)


def dense_matrix(
    operator: UnitaryOperator, factors: tuple, n: int, dtype: torch.dtype, device: torch.device | None = None
) -> torch.Tensor:
    """W itself (n, n), from the operator applied to the identity (for analysis, never in the recurrence)."""
    return operator.apply(torch.eye(n, dtype=dtype, device=device), factors).transpose(0, 1)  # row k is W e_k


def interleaved_input(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """U x_t for all steps as complex (T, B, n), from inputs x (B, T, m) and the real [Re U; Im U] (2n, m): the
    rows are interleaved (Re U_0, Im U_0, Re U_1, ...) so that the product is already complex, with no copy."""
    m = weight.shape[-1]
    rows = weight.view(2, -1, m).transpose(0, 1).reshape(-1, m)
    return torch.view_as_complex(torch.matmul(x.transpose(0, 1), rows.t()).unflatten(-1, (-1, 2)))


def gather_units(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[:, index] for rows x (B, n). complex64 is gathered as 8-byte integers with torch.gather, about 4x
    faster here than index_select within rows; tensors that autograd follows take index_select (a tensor saved
    for the backward still requires grad there, but grad mode is off)."""
    if x.dtype == torch.complex64 and x.is_contiguous() and not (x.requires_grad and torch.is_grad_enabled()):
        return torch.gather(x.view(torch.int64), 1, index.expand(x.shape[0], -1)).view(torch.complex64)
    return x.index_select(1, index)


def _modrelu_scale(
    z: torch.Tensor,
    b: torch.Tensor,
    r: torch.Tensor | None = None,
    s: torch.Tensor | None = None,
    modrelu: ModReLU = SCURNN_MODRELU,
    root_eps: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(r, s) of sigma_eps at z, written into r and s if given: r = sqrt(|z|^2 + eps), s = relu(r + b) / (r + eps).
    root_eps: modrelu.root_eps as a 0-d tensor on z's device, made once per pass by the caller (one made here from
    the Python number would be a host-to-device copy, a sync, at every step)."""
    re, im = z.real, z.imag
    if root_eps is None:
        root_eps = torch.full((), modrelu.root_eps, dtype=re.dtype, device=re.device)
    r = torch.addcmul(root_eps, re, re, out=r).addcmul_(im, im).sqrt_()
    s = torch.add(r, b, out=s)
    if modrelu.numerator_eps:  # the EUNN code's relu(|z| + eps + b)
        s.add_(modrelu.numerator_eps)
    return r, s.relu_().div_(r + modrelu.denominator_eps)  # eq. (5)


def parameter_gradients(
    operator: UnitaryOperator, params: tuple[torch.Tensor, ...], wanted: list[int], factor_grads: list[torch.Tensor]
) -> list[torch.Tensor | None]:
    """dL/dparams (None where not wanted) from dL/dfactor, aligned with the first factors of `prepare`: by
    autograd through `prepare`, once per backward."""
    grad_params = [None] * len(params)
    if wanted:
        with torch.enable_grad():
            leaves = [p.detach().requires_grad_(i in wanted) for i, p in enumerate(params)]
            formed = operator.prepare(*leaves)
            pairs = [(f, g) for f, g in zip(formed, factor_grads) if f.requires_grad]
            found = torch.autograd.grad(
                [f for f, _ in pairs], [leaves[i] for i in wanted], [g for _, g in pairs], allow_unused=True
            )
        for i, grad in zip(wanted, found):
            grad_params[i] = torch.zeros_like(params[i]) if grad is None else grad
    return grad_params


class _OperatorRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, operator, modrelu, u, b, h0, offsets, *params):
        # complex u: (T, B, n) input projections; b: (n,); h0: (B, n); offsets: like u or None
        factors = operator.prepare(*params)
        z, h = torch.empty_like(u), torch.empty_like(u)
        r, s = torch.empty_like(h0.real), torch.empty_like(h0.real)  # sigma_eps's r and s of one step, reused
        root_eps = torch.full((), modrelu.root_eps, dtype=r.dtype, device=r.device)  # once, on the device
        state = h0
        for t, (u_t, z_t, h_t) in enumerate(zip(u.unbind(0), z.unbind(0), h.unbind(0))):
            operator.apply(state, factors, plus=u_t, out=z_t)  # z_t = u_t + W h_{t-1}
            _modrelu_scale(z_t, b, r, s, modrelu, root_eps)
            torch.mul(z_t, s, out=h_t)  # h_t = sigma_eps(z_t, b) = z_t s, eq. (5)
            if offsets is not None:
                h_t.add_(offsets[t])
            state = h_t
        ctx.operator, ctx.modrelu = operator, modrelu
        ctx.save_for_backward(b, h0, z, h, *params)  # r and s are recomputed from z: two fewer (T, B, n) arrays
        # the real features, a view of h: through view_as_real's backward, whose contiguous() copies a transposed
        # gradient, the backward would hold one more (T, B, n) array at its peak
        return to_real(h)

    @staticmethod
    def backward(ctx, grad_features):
        refuse_create_graph("uRNN/EURNN recurrence", "models/operator_recurrence.py")
        refuse_second_backward(ctx, "uRNN/EURNN", "models/operator_recurrence.py")
        operator = ctx.operator
        grad_h = gradient_as_complex(grad_features)
        b, state0, z, h, *params = ctx.saved_tensors
        factors = operator.prepare(*params)
        grad_z = z  # dL/dz_t overwrites z_t once step t is done with it: one (T, B, n) array fewer at the peak
        grad_b = torch.zeros_like(z.real[0])  # per row, summed over the batch after the loop
        r, s, inverse, along = (torch.empty_like(grad_b) for _ in range(4))  # one step's scratch, reused
        root_eps = torch.full((), ctx.modrelu.root_eps, dtype=r.dtype, device=r.device)  # once, on the device
        wanted = [i for i in range(len(params)) if ctx.needs_input_grad[6 + i]]
        grads = operator.gradient_buffers(factors, z.shape[1])  # dL/dfactor, summed over the steps
        want_total = ctx.needs_input_grad[5]
        modrelu = ctx.modrelu
        tiny = torch.finfo(grad_b.dtype).tiny  # r = 0 only at z = 0 (no root eps), where z . dL/dh_t = 0 too
        total = torch.empty_like(z) if want_total else None
        carry = grad_h[-1]
        for t in range(z.shape[0] - 1, -1, -1):
            if want_total:
                total[t] = carry
            z_t, grad_z_t = z[t], grad_z[t]
            _modrelu_scale(z_t, b, r, s, modrelu, root_eps)
            torch.add(r, modrelu.denominator_eps, out=inverse).reciprocal_().masked_fill_(s <= 0, 0.0)  # ds/db
            torch.mul(z_t.real, carry.real, out=along).addcmul_(z_t.imag, carry.imag)  # z . dL/dh_t per unit
            grad_b.addcmul_(along, inverse)
            # dL/dz_t = s dL/dh_t + s'(r)/r z (z . dL/dh_t), s'(r)/r = (eps - b) / ((r + eps)^2 r)
            slope = modrelu.denominator_eps - modrelu.numerator_eps - b  # (den - num - b) in general
            along.mul_(inverse.square_().mul_(slope)).div_(r if modrelu.root_eps else r.clamp_(min=tiny))
            grad_z_t.mul_(along).addcmul_(carry, s)  # in z_t's place: z_t is not read again
            tape = None
            if wanted:  # the factors' (conjugated) inputs at h_{t-1}, for sum_t <dL/dz_t, dW h_{t-1}>
                tape = []
                operator.apply((h[t - 1] if t else state0).conj().resolve_conj(), factors, tape=tape, conjugate=True)
            back = operator.adjoint(grad_z_t, factors, tape, grads)  # dL/dh_{t-1} = direct + W^H dL/dz_t
            carry = back.add_(grad_h[t - 1]) if t else back
        factor_grads = operator.factor_gradients(grads) if wanted else []
        grad_params = parameter_gradients(operator, params, wanted, factor_grads)  # through `prepare`, once
        return (None, None, grad_z, grad_b.sum(dim=0), carry, total, *grad_params)


def operator_recurrence(
    operator: UnitaryOperator,
    u: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    params: tuple[torch.Tensor, ...],
    offsets: torch.Tensor | None = None,
    modrelu: ModReLU = SCURNN_MODRELU,
) -> torch.Tensor:
    """All hidden states h_t (T, B, n), complex, of h_t = sigma_eps(u_t + W h_{t-1}, b) [+ offsets_t], W given by
    `operator` and its trainable `params`; u (T, B, n), h0 (B, n) and offsets (T, B, n) complex, b (n,) real."""
    return to_complex(operator_recurrence_features(operator, u, b, h0, params, offsets, modrelu))


def operator_recurrence_features(
    operator: UnitaryOperator,
    u: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    params: tuple[torch.Tensor, ...],
    offsets: torch.Tensor | None = None,
    modrelu: ModReLU = SCURNN_MODRELU,
) -> torch.Tensor:
    """`operator_recurrence`'s states as interleaved real features (T, B, 2n), the layers' output (a view)."""
    return _OperatorRecurrence.apply(operator, modrelu, u, b, h0, offsets, *params)


def operator_recurrence_reference(
    operator: UnitaryOperator,
    u: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    params: tuple[torch.Tensor, ...],
    offsets: torch.Tensor | None = None,
    modrelu: ModReLU = SCURNN_MODRELU,
):
    """The same recurrence step by step with plain autograd: the oracle the hand-written BPTT is tested against."""
    factors = operator.prepare(*params)
    state, out = h0, []
    for t, u_t in enumerate(u.unbind(0)):
        state = modrelu(operator.apply(state, factors, plus=u_t), b)
        if offsets is not None:
            state = state + offsets[t]
        out.append(state)
    return torch.stack(out)


class FactoredUnitaryLayer(RecurrentLayer):
    """A complex modReLU layer whose W is an operator of cheap factors; its 2n output features are the hidden
    state interleaved (Re h_0, Im h_0, Re h_1, ...), as are `h0` and the state offsets.

    Subclasses set `input_weight` ([Re U; Im U], (2n, m)), `bias` (n,), `h0` (2n,) and give `operator()` and
    `recurrent_params()` (the trainable tensors `operator().prepare` takes, the first fixing dtype and device).
    """

    keeps_orthogonal = True

    supports_state_offsets = True
    layout = "interleaved"

    def operator(self) -> UnitaryOperator:
        raise NotImplementedError

    def recurrent_params(self) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def recurrent_matrix(self) -> torch.Tensor:
        """The dense W (analysis only), by applying the factors to the identity."""
        params = self.recurrent_params()
        dtype = torch.complex128 if params[0].dtype == torch.float64 else torch.complex64
        operator = self.operator()
        return dense_matrix(operator, operator.prepare(*params), self.hidden_size, dtype, params[0].device)

    def nonfinite_hint(self) -> str | None:
        if bool((self.bias > 0).any()):
            return (
                "modReLU biases b > 0 with small |z| give derivatives up to ~b / sqrt(eps) (scuRNN Theorem 4): "
                "lower model.optimizers.other.lr"
            )
        return None

    def forward(
        self, x: torch.Tensor, state_offsets: torch.Tensor | None = None, initial_state: torch.Tensor | None = None
    ) -> torch.Tensor:
        """All hidden features (B, T, 2n), W applied factor by factor at every step; initial_state: h0 (B, 2n)
        interleaved, else the layer's own."""
        u = interleaved_input(x, self.input_weight)  # (T, B, n) complex: U x_t for all steps at once
        h0 = to_complex(self.h0).expand(x.shape[0], -1) if initial_state is None else to_complex(initial_state)
        offsets = None if state_offsets is None else to_complex(state_offsets.transpose(0, 1))  # a view
        recurrence = self.recurrence_for(u)
        return recurrence(self.operator(), u, self.bias, h0, self.recurrent_params(), offsets).transpose(0, 1)

    def recurrence_for(self, u: torch.Tensor):
        """The function that runs the recurrence for inputs u: the BPTT above, unless a subclass has compiled
        loops for u's device and dtype (same arguments as `operator_recurrence_features`)."""
        return operator_recurrence_features
