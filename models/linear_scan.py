"""The diagonal linear recurrence h_t = a_t * h_{t-1} + b_t over a whole sequence at once, by a parallel scan.

A decay that is the same at every step (one per state, as in the LRU and S4D) takes the chunked scan,
`diagonal_scan`: the steps are cut into chunks of about sqrt(T); inside each chunk every state is one batched
product with the chunk's transfer matrix L[c, j] = a^(c-j) (j <= c), and the chunks' last states form the same
recurrence with decay a^C, T/C steps long, scanned the same way; each step then adds a^(c+1) times the state the
chunk started from. Only powers a^k with k >= 0 appear (at most 1 in modulus for a stable decay), so nothing
overflows, and the work is one matrix product and a few passes over the states. It wants the states first and
time last, (S, ..., T), where the products are contiguous; the LRU and S4D lay their states out that way.

Decays that change from step to step take Hillis-Steele doubling (1986): steps compose associatively,
(a, b) then (a', b') = (a' a, a' b + b'), so every prefix is found in ceil(log2 T) rounds; after the round with
shift d, h_t sums the last 2d inputs. Python loops over rounds or chunk levels, never over time steps.

The backward pass is the same scan run backwards in time with conj(a): dL/db_t = G_t, G_t = dL/dh_t +
conj(a_{t+1}) G_{t+1}, and dL/da_t = G_t conj(h_{t-1}) (PyTorch's convention for complex gradients). Only the
states are saved, and the backward pass calls the scan itself, so it is differentiable again.
"""

from __future__ import annotations

import math

import torch

SINGLE_CHUNK = 32  # up to this many steps, one chunk: one product, no carry
CHUNK_RANGE = (16, 48)  # a chunk length that divides T is looked for here (none: T is padded to whole chunks)


def chunk_length(steps: int) -> int:
    """The chunk length C for T steps: T itself up to SINGLE_CHUNK, else the divisor of T in CHUNK_RANGE nearest
    sqrt(T) (no padding), else ceil(sqrt(T)) clipped to CHUNK_RANGE. The products cost C per state, the carries
    T/C: sqrt(T) balances them."""
    if steps <= SINGLE_CHUNK:
        return steps
    root = math.sqrt(steps)
    divisors = [c for c in range(CHUNK_RANGE[0], CHUNK_RANGE[1] + 1) if steps % c == 0]
    if divisors:
        return min(divisors, key=lambda c: abs(c - root))
    return min(max(math.ceil(root), CHUNK_RANGE[0]), CHUNK_RANGE[1])


def _chunked(decay: torch.Tensor, b: torch.Tensor, reverse: bool) -> torch.Tensor:
    """All h (S, M, T) of h_t = decay h_{t-1} + b_t from zeros (reverse: h_t = decay h_{t+1} + b_t, from the end);
    decay (S,), b (S, M, T); no autograd."""
    states, rows, steps = b.shape
    if steps == 0 or rows == 0:
        return b.clone()
    chunk = chunk_length(steps)
    chunks = -(-steps // chunk)
    pad = chunks * chunk - steps
    if pad:  # zeros after the last step (reverse: before the first), where no real step can see them
        zeros = b.new_zeros(states, rows, pad)
        b = torch.cat([zeros, b] if reverse else [b, zeros], dim=-1)
    steps_up = torch.cumprod(decay.unsqueeze(-1).expand(states, chunk), dim=-1)  # a^1..a^C, one rounding per power
    powers = torch.cat([torch.ones_like(decay).unsqueeze(-1), steps_up], dim=-1)  # a^0..a^C (S, C + 1)
    # powers below the smallest normal number set to 0 (a state moves by less than that times |b|): subnormals slow
    # every product that meets them many times on some CPUs (docs/benchmarks.md)
    powers = powers.masked_fill(powers.abs() < torch.finfo(powers.real.dtype).tiny, 0)
    lag = torch.arange(chunk, device=b.device)
    lag = lag.unsqueeze(1) - lag.unsqueeze(0)  # c - j
    lag = -lag if reverse else lag  # reverse: j - c
    transfer = torch.where(lag >= 0, powers[:, lag.clamp(min=0)], 0)  # (S, C, C): h_c = Σ_j L[c, j] b_j in a chunk
    local = torch.bmm(b.reshape(states, rows * chunks, chunk), transfer.transpose(1, 2))
    local = local.view(states, rows, chunks, chunk)
    if chunks > 1:  # each chunk's state at its end (reverse: its start) carries over with decay a^C
        carried = _chunked(powers[:, chunk], local[..., 0 if reverse else -1], reverse)  # (S, M, K)
        if reverse:  # h_c += a^(C-c) H_{k+1}
            local[:, :, :-1, :] += carried[:, :, 1:, None] * powers[:, 1:].flip(-1)[:, None, None, :]
        else:  # h_c += a^(c+1) H_{k-1}
            local[:, :, 1:, :] += carried[:, :, :-1, None] * powers[:, None, None, 1:]
    h = local.view(states, rows, chunks * chunk)
    return h[..., pad:] if reverse else h[..., :steps]


class _DiagonalScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, decay, inputs, reverse):
        rows = math.prod(inputs.shape[1:-1])  # every sequence of every state, (S, rows, T)
        h = _chunked(decay, inputs.reshape(inputs.shape[0], rows, inputs.shape[-1]), reverse).reshape(inputs.shape)
        ctx.reverse = reverse
        ctx.save_for_backward(decay, h)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        decay, h = ctx.saved_tensors
        grad_inputs = diagonal_scan(decay.conj(), grad_h, reverse=not ctx.reverse)  # the same scan, the other way
        grad_decay = None
        if ctx.needs_input_grad[0]:  # dL/da = Σ_t G_t conj(h_{t-1}) (reverse: h_{t+1})
            if ctx.reverse:
                earlier, later = h[..., 1:], grad_inputs[..., :-1]
            else:
                earlier, later = h[..., :-1], grad_inputs[..., 1:]
            grad_decay = (later * earlier.conj()).reshape(h.shape[0], -1).sum(-1)
        return grad_decay, grad_inputs, None


def diagonal_scan(
    decay: torch.Tensor, inputs: torch.Tensor, initial: torch.Tensor | None = None, reverse: bool = False
) -> torch.Tensor:
    """All states h (S, ..., T) of h_t = decay * h_{t-1} + inputs_t, states first and time last, from h_{-1} =
    `initial` (S, ...) or zeros; reverse: h_t = decay * h_{t+1} + inputs_t from the last step back.

    decay (S,), one per state, real or complex; inputs (S, ..., T); promoted to a common dtype. Chunked scan
    (module docstring).
    """
    if decay.dim() != 1:
        raise ValueError(f"decay should be one value per state, shape (S,), got shape {tuple(decay.shape)}")
    if inputs.dim() < 2 or inputs.shape[0] != decay.shape[0]:
        raise ValueError(
            f"inputs should be (S, ..., T) with S = {decay.shape[0]} states first, got shape {tuple(inputs.shape)}"
        )
    if initial is not None and tuple(initial.shape) != tuple(inputs.shape[:-1]):
        raise ValueError(
            f"initial should be the state before the first step, shape {tuple(inputs.shape[:-1])} (inputs without "
            f"time), got shape {tuple(initial.shape)}"
        )
    dtype = torch.promote_types(decay.dtype, inputs.dtype)
    decay, inputs = decay.to(dtype), inputs.to(dtype)
    if initial is not None:  # h_0 = a h_{-1} + b_0: the initial state enters as part of the first input
        scale = decay.view(-1, *[1] * (initial.dim() - 1))
        edge = -1 if reverse else 0
        first = inputs[..., edge] + scale * initial.to(dtype)
        rest = inputs[..., :-1] if reverse else inputs[..., 1:]
        inputs = torch.cat([rest, first.unsqueeze(-1)] if reverse else [first.unsqueeze(-1), rest], dim=-1)
    return _DiagonalScan.apply(decay, inputs, reverse)


def _doubling_rounds(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """All h_t of h_t = a_t h_{t-1} + b_t from h_{-1} = 0 (no autograd): Hillis-Steele doubling over time."""
    steps, constant = b.shape[-2], a.shape[-2] == 1
    b = b.clone(memory_format=torch.contiguous_format)  # written in place below; the caller's b is left alone
    shift = 1
    while shift < steps:  # ceil(log2 T) rounds
        # h_t += (a_t ... a_{t-d+1}) h_{t-d}: the product is formed from the previous round's values before the add
        b[..., shift:, :].add_((a if constant else a[..., shift:, :]) * b[..., :-shift, :])
        if constant:
            a = a * a  # a^(2d): every step's product over the next round's window
        else:  # the products over the last 2d steps (those reaching before t = 0 multiply zeros)
            a = torch.cat([a[..., :shift, :], a[..., shift:, :] * a[..., :-shift, :]], dim=-2)
        shift *= 2
    return b


class _LinearScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        h = _doubling_rounds(a, b)
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        a, h = ctx.saved_tensors
        if a.shape[-2] == 1:  # the same decay at every step: the reversed recurrence has conj(a) too
            backwards = a.conj()
        else:  # reversed time s = T-1-t: G'_s = g'_s + conj(a_{T-s}) G'_{s-1}; the factor at s = 0 meets zeros
            backwards = torch.cat([a[..., 1:, :], torch.ones_like(a[..., :1, :])], dim=-2).conj().flip(-2)
        grad_b = linear_scan(backwards, grad_h.flip(-2)).flip(-2)
        grad_a = None
        if ctx.needs_input_grad[0]:
            previous = torch.cat([torch.zeros_like(h[..., :1, :]), h[..., :-1, :]], dim=-2)  # h_{t-1}, h_{-1} = 0
            grad_a = (grad_b * previous.conj()).sum_to_size(a.shape)
        return grad_a, grad_b


def linear_scan(a: torch.Tensor, b: torch.Tensor, initial: torch.Tensor | None = None) -> torch.Tensor:
    """All states h_t (..., T, S) of h_t = a_t * h_{t-1} + b_t, from h_{-1} = `initial` (..., S) or zeros.

    a: the decays, (..., T, S), or (..., 1, S) or (S,) when the same at every step; b: the inputs (..., T, S).
    Real or complex; a and b are promoted to a common dtype.
    """
    dtype = torch.promote_types(a.dtype, b.dtype)
    a, b = a.to(dtype), b.to(dtype)
    if a.dim() == 1 or (a.dim() == 2 and a.shape[0] == 1):  # one decay per state: the chunked scan, states first
        decay = a.reshape(-1)
        b = b.expand(*b.shape[:-1], decay.shape[0])
        first = None if initial is None else initial.to(dtype).expand(b.shape[:-2] + b.shape[-1:]).movedim(-1, 0)
        return diagonal_scan(decay, b.movedim(-1, 0), first).movedim(0, -1)
    b = b.expand(torch.broadcast_shapes(a.shape, b.shape))  # one input per state and step
    if initial is not None:  # h_0 = a_0 h_{-1} + b_0: the initial state enters as part of the first input
        first = b[..., :1, :] + a[..., :1, :] * initial.to(dtype).unsqueeze(-2)
        b = torch.cat([first, b[..., 1:, :]], dim=-2)
    return _LinearScan.apply(a, b)


def linear_recurrence_loop(a: torch.Tensor, b: torch.Tensor, initial: torch.Tensor | None = None) -> torch.Tensor:
    """The same states, one step at a time with plain autograd: the oracle the scan is tested against."""
    dtype = torch.promote_types(a.dtype, b.dtype)
    a, b = a.to(dtype), b.to(dtype)
    if a.dim() == 1:
        a = a.unsqueeze(0)
    h = torch.zeros_like(b[..., 0, :]) if initial is None else initial.to(dtype)
    states = []
    for t in range(b.shape[-2]):
        h = a[..., 0 if a.shape[-2] == 1 else t, :] * h + b[..., t, :]
        states.append(h)
    return torch.stack(states, dim=-2)
