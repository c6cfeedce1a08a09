"""Causal convolution of a multi-channel sequence with a matrix-valued kernel (or one kernel per channel), all steps
at once by FFT.

    y_k = Σ_{j<=k} u_j K_{k-j},   u_j (G,), K_l (G, H), y_k (H,),   k = 0..T-1
    (per channel: y_k = Σ_{j<=k} K_{k-j} ⊙ u_j, K_l (H,))

A linear time-invariant recurrence seen from its input and output is such a convolution (its impulse response is K),
so the whole sequence costs two FFTs of the input's size, one of the kernel's and one small complex matrix product
per frequency (one batched product for all of them), instead of T dependent steps. Both the input and the kernel are
zero-padded to 2T, so the circular convolution the FFT computes has no wrap-around.

The backward is written out (`_CausalConvolution`): the gradients are the same convolution run backwards in time,
dL/du = irfft(rfft(g) K_f^H) and dL/dK = irfft(Σ_b u_f^H rfft(g)), each cut to T steps (g = dL/dy). That is one
real FFT of g and two inverse ones; autograd's own backward of a zero-padded rfft takes a complex FFT of twice the
size for each of u and K. They are first derivatives only (a second backward raises).
"""

from __future__ import annotations

import torch

from ortholab.models.backward_limits import refuse_create_graph


def _spectrum(sequence: torch.Tensor, size: int) -> torch.Tensor:
    """rfft of (B, T, C) over time, zero-padded to `size`, as (F, B, C) contiguous: the frequencies outermost, as the
    batched products take them. The FFT runs along time made innermost (a real copy), which took less time on this
    CPU than the FFT along a strided time axis (docs/benchmarks.md)."""
    return torch.fft.rfft(sequence.transpose(1, 2).contiguous(), n=size).permute(2, 0, 1).contiguous()


class _CausalConvolution(torch.autograd.Function):
    @staticmethod
    def forward(ctx, signal: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        steps = signal.shape[1]
        size = 2 * steps
        signal_f = _spectrum(signal, size)  # (F, B, G), F = T + 1
        kernel_f = torch.fft.rfft(kernel.permute(1, 2, 0), n=size).permute(2, 0, 1).contiguous()  # (F, G, H)
        y = torch.fft.irfft(torch.bmm(signal_f, kernel_f), n=size, dim=0)[:steps]  # u_f K_f per frequency: (T, B, H)
        ctx.save_for_backward(signal_f, kernel_f)
        return y.transpose(0, 1).contiguous()  # (B, T, H) in memory too, as the signal (see models/ssm_block.py)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        refuse_create_graph("LRU/S4D FFT convolution", "models/fft_convolution.py")
        signal_f, kernel_f = ctx.saved_tensors
        steps = grad.shape[1]
        size = 2 * steps
        grad_f = _spectrum(grad, size)  # (F, B, H)
        grad_signal = grad_kernel = None
        if ctx.needs_input_grad[0]:  # rfft(g) K_f^H
            grad_signal = torch.fft.irfft(torch.bmm(grad_f, kernel_f.mH), n=size, dim=0)[:steps]
            grad_signal = grad_signal.transpose(0, 1).contiguous()  # (B, T, G) in memory, as the forward's y
        if ctx.needs_input_grad[1]:  # Σ_b conj(u_f)^T rfft(g)
            grad_kernel_f = torch.bmm(signal_f.mH, grad_f).permute(1, 2, 0)  # (G, H, F): time innermost, as K's
            grad_kernel = torch.fft.irfft(grad_kernel_f, n=size)[..., :steps].permute(2, 0, 1)
        return grad_signal, grad_kernel


class _ChannelwiseCausalConvolution(torch.autograd.Function):
    @staticmethod
    def forward(ctx, signal: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        size = 2 * signal.shape[-1]
        signal_f, kernel_f = torch.fft.rfft(signal, n=size), torch.fft.rfft(kernel, n=size)  # (B, H, F), (H, F)
        ctx.save_for_backward(signal_f, kernel_f)
        return torch.fft.irfft(signal_f * kernel_f, n=size)[..., : signal.shape[-1]]

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        refuse_create_graph("LRU/S4D FFT convolution", "models/fft_convolution.py")
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
