"""Causal convolution of a multi-channel sequence with a matrix-valued kernel (or one kernel per channel), all steps
at once by FFT.

    y_k = Σ_{j<=k} u_j K_{k-j},   u_j (G,), K_l (G, H), y_k (H,),   k = 0..T-1
    (per channel: y_k = Σ_{j<=k} K_{k-j} ⊙ u_j, K_l (H,))

A linear time-invariant recurrence seen from its input and output is such a convolution (its impulse response is K),
so the whole sequence costs two FFTs of the input's size, one of the kernel's and one small matrix product per
frequency, instead of T dependent steps. Both the input and the kernel are zero-padded to 2T, so the circular
convolution the FFT computes has no wrap-around.

The backward is written out (`_CausalConvolution`): the gradients are the same convolution run backwards in time,
dL/du = irfft(rfft(g) K_f^H) and dL/dK = irfft(Σ_b u_f^H rfft(g)), each cut to T steps (g = dL/dy). That is one
real FFT of g and two inverse ones; autograd's own backward of a zero-padded rfft takes a complex FFT of twice the
size for each of u and K. They are first derivatives only (a second backward raises).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


def _real_layout(spectrum: torch.Tensor) -> torch.Tensor:
    """(F, B, C) complex as (F, B, 2C) real, each channel's real and imaginary parts side by side (a copy: torch's FFT
    along dim 0 leaves the frequencies innermost in memory, and the batched product wants them outermost)."""
    return torch.view_as_real(spectrum).flatten(-2)


def _complex_layout(values: torch.Tensor) -> torch.Tensor:
    """The inverse of `_real_layout`: (F, B, 2C) real as (F, B, C) complex."""
    return torch.view_as_complex(values.unflatten(-1, (-1, 2)))


def _product_matrices(kernel_f: torch.Tensor) -> torch.Tensor:
    """(F, 2G, 2H) real from K_f (F, G, H) complex: right-multiplying the row (Re u_1, Im u_1, ..., Re u_G, Im u_G)
    by it gives (Re (u K_f)_1, Im (u K_f)_1, ...), since (a + ib)(c + id) = (ac - bd) + i(ad + bc): the block of
    channels g, h is [[c, d], [-d, c]]. torch's complex batched product on the CPU loops over the batch; its real one
    does not."""
    c, d = kernel_f.real, kernel_f.imag
    blocks = torch.stack([torch.stack([c, d], -1), torch.stack([-d, c], -1)], 2)  # (F, G, 2, H, 2)
    return blocks.flatten(1, 2).flatten(2, 3)


class _CausalConvolution(torch.autograd.Function):
    @staticmethod
    def forward(ctx, signal: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        steps = signal.shape[1]
        size = 2 * steps
        signal_f = _real_layout(torch.fft.rfft(signal.transpose(0, 1), n=size, dim=0))  # (F, B, 2G), F = T + 1
        products = _product_matrices(torch.fft.rfft(kernel, n=size, dim=0))  # (F, 2G, 2H)
        y = torch.fft.irfft(_complex_layout(torch.bmm(signal_f, products)), n=size, dim=0)[:steps]  # (T, B, H)
        ctx.save_for_backward(signal_f, products)
        return y.transpose(0, 1).contiguous()  # (B, T, H) in memory too, as the signal (see models/ssm_block.py)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        signal_f, products = ctx.saved_tensors
        steps = grad.shape[1]
        size = 2 * steps
        grad_f = _real_layout(torch.fft.rfft(grad.transpose(0, 1), n=size, dim=0))  # (F, B, 2H)
        grad_signal = grad_kernel = None
        if ctx.needs_input_grad[0]:  # rfft(g) K_f^H: the transposed block is the product by conj(K_f)
            grad_signal_f = torch.bmm(grad_f, products.transpose(1, 2))
            grad_signal = torch.fft.irfft(_complex_layout(grad_signal_f), n=size, dim=0)[:steps]
            grad_signal = grad_signal.transpose(0, 1).contiguous()  # (B, T, G) in memory, as the forward's y
        if ctx.needs_input_grad[1]:  # Σ_b conj(u_f) rfft(g): the real products [Re | Im]^T [Re | Im] combined
            m = torch.bmm(signal_f.transpose(1, 2), grad_f).unflatten(2, (-1, 2)).unflatten(1, (-1, 2))
            grad_kernel_f = torch.complex(m[:, :, 0, :, 0] + m[:, :, 1, :, 1], m[:, :, 0, :, 1] - m[:, :, 1, :, 0])
            grad_kernel = torch.fft.irfft(grad_kernel_f, n=size, dim=0)[:steps]
        return grad_signal, grad_kernel


class _ChannelwiseCausalConvolution(torch.autograd.Function):
    @staticmethod
    def forward(ctx, signal: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        size = 2 * signal.shape[-1]
        signal_f, kernel_f = torch.fft.rfft(signal, n=size), torch.fft.rfft(kernel, n=size)  # (B, H, F), (H, F)
        ctx.save_for_backward(signal_f, kernel_f)
        return torch.fft.irfft(signal_f * kernel_f, n=size)[..., : signal.shape[-1]]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        signal_f, kernel_f = ctx.saved_tensors
        steps = grad.shape[-1]
        grad_f = torch.fft.rfft(grad, n=2 * steps)
        grad_signal = grad_kernel = None
        if ctx.needs_input_grad[0]:
            grad_signal = torch.fft.irfft(grad_f * kernel_f.conj(), n=2 * steps)[..., :steps]
        if ctx.needs_input_grad[1]:
            grad_kernel = torch.fft.irfft((grad_f * signal_f.conj()).sum(dim=0), n=2 * steps)[..., :steps]
        return grad_signal, grad_kernel


def channelwise_causal_convolution(signal: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """y (B, H, T) from the real signal u (B, H, T) and one real kernel per channel K (H, T) (module docstring)."""
    if signal.dim() != 3 or kernel.dim() != 2 or kernel.shape != signal.shape[1:]:
        raise ValueError(
            f"signal should be (batch, channels, steps) and kernel (channels, steps), got shapes "
            f"{tuple(signal.shape)} and {tuple(kernel.shape)}"
        )
    if signal.numel() == 0:  # nothing to transform (an FFT of 0 points is an error)
        return signal.new_zeros(signal.shape)
    return _ChannelwiseCausalConvolution.apply(signal, kernel)


def causal_convolution(signal: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """y (B, T, H) from the real signal u (B, T, G) and the real kernel K (T, G, H) (module docstring)."""
    if signal.dim() != 3:
        raise ValueError(f"signal should be (batch, steps, channels), got shape {tuple(signal.shape)}")
    batch, steps, channels = signal.shape
    if kernel.dim() != 3 or kernel.shape[:2] != (steps, channels):
        raise ValueError(
            f"kernel should be ({steps}, {channels}, outputs) for a signal of {steps} steps and {channels} "
            f"channels, got shape {tuple(kernel.shape)}"
        )
    if signal.numel() == 0 or kernel.numel() == 0:  # nothing to transform (an FFT of 0 points is an error)
        return signal.new_zeros(batch, steps, kernel.shape[2])
    return _CausalConvolution.apply(signal, kernel)
