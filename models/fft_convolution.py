"""Causal convolution of a multi-channel sequence with a matrix-valued kernel, all steps at once by FFT.

    y_k = Σ_{j<=k} K_{k-j} u_j,   u_j (G,), K_l (H, G), y_k (H,),   k = 0..T-1

A linear time-invariant recurrence seen from its input and output is such a convolution (its impulse response is K),
so the whole sequence costs two FFTs of the input's size, one of the kernel's and one small matrix product per
frequency, instead of T dependent steps. Both the input and the kernel are zero-padded to 2T, so the circular
convolution the FFT computes has no wrap-around.
"""

from __future__ import annotations

import torch


def causal_convolution(signal: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """y (B, T, H) from the real signal u (B, T, G) and the real kernel K (H, G, T) (module docstring)."""
    if signal.dim() != 3:
        raise ValueError(f"signal should be (batch, steps, channels), got shape {tuple(signal.shape)}")
    batch, steps, channels = signal.shape
    if kernel.dim() != 3 or kernel.shape[1:] != (channels, steps):
        raise ValueError(
            f"kernel should be (outputs, {channels}, {steps}) for a signal of {channels} channels and {steps} "
            f"steps, got shape {tuple(kernel.shape)}"
        )
    outputs, size = kernel.shape[0], 2 * steps
    if signal.numel() == 0:  # no sequences or no steps: nothing to transform (an FFT of 0 points is an error)
        return signal.new_zeros(batch, steps, outputs)
    k_f = torch.fft.rfft(kernel, n=size).permute(2, 0, 1)  # (F, H, G), F = T + 1 frequencies
    u_f = torch.fft.rfft(signal.transpose(1, 2), n=size).permute(2, 1, 0)  # (F, G, B)
    # one complex (H, G) @ (G, B) product per frequency, as a real (2H, 2G) @ (2G, B) one: torch's complex batched
    # product on the CPU loops over the batch, its real one does not
    blocks = torch.cat([torch.cat([k_f.real, -k_f.imag], 2), torch.cat([k_f.imag, k_f.real], 2)], 1)
    y_f = torch.bmm(blocks, torch.cat([u_f.real, u_f.imag], 1))  # (F, 2H, B): [Re; Im] of K_f u_f
    y_f = torch.complex(y_f[:, :outputs], y_f[:, outputs:]).permute(2, 0, 1)  # (B, F, H)
    return torch.fft.irfft(y_f, n=size, dim=1)[:, :steps]
