"""LRU: the Linear Recurrent Unit (Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu, De 2023, "Resurrecting Recurrent
Neural Networks for Long Sequences", ICML), in the deep state-space block of models/ssm_block.py.

    x_k = Λ x_{k-1} + γ ⊙ (B u_k),   y_k = Re(C x_k) + D u_k,   Λ = diag(exp(-exp(ν) + i exp(θ))),   γ > 0

x is complex (state_size N), u and y real (hidden_size H). Λ's moduli exp(-exp(ν)) lie below 1 for every ν, and the
initialisation draws Λ uniformly on the ring r_min <= |λ| <= r_max with phases in [0, max_phase]; γ starts at
sqrt(1 - |λ|^2), which keeps E|x_k|^2 = E|B u_k|^2 for white inputs. The recurrence runs as a parallel scan
(models/linear_scan.py) or, when no state is carried in or out and it is the less work, as the convolution of u
with the system's impulse response by FFT (models/fft_convolution.py); both give the same y. Defaults and
initialisation are the paper's Appendix A code, as reproduced by NicolasZucchet/minimal-LRU (lru/model.py, commit
bbd71b1), cited line by line below.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from ortholab.models.base import ConfigError
from ortholab.models.choices import checks_choices
from ortholab.models.fft_convolution import causal_convolution
from ortholab.models.linear_scan import diagonal_scan
from ortholab.models.sequence import lecun_normal_
from ortholab.models.ssm_block import SSM_STATE, DiagonalStateSpaceLayer, FeatureBatchNorm, positive_int, real_number


def _clamped(nu_log: torch.Tensor, theta_log: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ν and θ clamped in their own dtype where λ would round to 1 or overflow (ring_eigenvalues says where)."""
    info = torch.finfo(nu_log.dtype)
    nu = nu_log.clamp(min=math.log(8 * info.eps), max=math.log(-math.log(info.tiny)))
    return nu, theta_log.clamp(max=math.log(info.max / 4))  # / 4: log(max) rounds up in float32


def ring_eigenvalues(nu_log: torch.Tensor, theta_log: torch.Tensor) -> torch.Tensor:
    """λ = exp(-exp(ν) + i exp(θ)) (the paper's Appendix A, lru/model.py:84), strictly inside the unit circle in
    floating point for every ν and θ.

    ν is clamped to [log(8 eps), log(-log tiny)] of the dtype: below, exp(-exp(ν)) would round to exactly 1 (a
    memory beyond 10^6 steps in float32, 10^14 in float64); above, exp(ν) would overflow and |λ| is below the
    smallest normal number anyway. θ is clamped below log(max / 4) so that the phase exp(θ) stays finite. The clamps
    leave the gradient 0 beyond them, where the formula's own is 0 or NaN.
    """
    nu, theta = _clamped(nu_log, theta_log)
    return torch.polar(torch.exp(-nu.exp()), theta.exp())  # |λ| = exp(-exp(ν)) < 1, arg λ = exp(θ)


def eigenvalue_powers(nu_log: torch.Tensor, theta_log: torch.Tensor, length: int) -> torch.Tensor:
    """λ^l = exp(l (-exp(ν) + i exp(θ))) for l = 0..length-1, (N, length), complex64 (complex128 for float64 ν).

    The exponent is formed in float64 from ν and θ as stored (clamped as ring_eigenvalues does): in float32 the
    phase l exp(θ), up to 784 x 2π at T = 784, would carry an absolute error of eps x 5000 = 3e-4 rad.
    """
    nu, theta = (t.double() for t in _clamped(nu_log, theta_log))
    steps = torch.arange(length, dtype=torch.float64, device=nu_log.device)
    real = torch.float64 if nu_log.dtype == torch.float64 else torch.float32
    modulus = torch.exp(-nu.exp().unsqueeze(-1) * steps)  # |λ^l| = exp(-l exp(ν))
    # Moduli below the smallest normal number of the kernel's dtype are set to 0 (each kernel entry moves by less than
    # that times |C γ B|): as subnormals they slow every product that meets them many times on some CPUs (benchmarks.md)
    modulus = modulus.masked_fill(modulus < torch.finfo(real).tiny, 0.0)
    # arg λ^l = l exp(θ): real exponentials and sines, cheaper than a complex exp
    powers = torch.polar(modulus, theta.exp().unsqueeze(-1) * steps)
    return powers.to(torch.complex128 if real == torch.float64 else torch.complex64)


class LinearRecurrentUnit(nn.Module):
    """x_k = Λ x_{k-1} + γ ⊙ (B u_k), y_k = Re(C x_k) + D u_k over (B, T, H) inputs (module docstring).

    Parameters as the reference code names them: nu_log, theta_log (Λ), gamma_log (γ), B_re, B_im (N, H),
    C_re, C_im (H, N), D (H,).
    """

    def __init__(self, width: int, state_size: int, r_min: float, r_max: float, max_phase: float, mode: str = "auto"):
        super().__init__()
        self.state_count, self.mode = state_size, mode
        # Λ uniform on the ring r_min <= |λ| <= r_max: |λ|^2 = u (r_max^2 - r_min^2) + r_min^2 (lru/model.py:22-24)
        tiny = torch.finfo(torch.get_default_dtype()).tiny  # U[0, 1) may draw 0: its log would make ν or θ infinite
        u1, u2 = torch.rand(state_size).clamp(min=tiny), torch.rand(state_size).clamp(min=tiny)
        self.nu_log = nn.Parameter(torch.log(-0.5 * torch.log(u1 * (r_max**2 - r_min**2) + r_min**2)))
        self.theta_log = nn.Parameter(torch.log(max_phase * u2))  # phase uniform in [0, max_phase] (lru/model.py:27-29)
        with torch.no_grad():  # γ = sqrt(1 - |λ|^2), the normalisation (lru/model.py:32-35, 57)
            modulus = ring_eigenvalues(self.nu_log, self.theta_log).abs()
            self.gamma_log = nn.Parameter(torch.log(torch.sqrt(1 - modulus**2)))
        # B ~ N(0, 1/(2H)) in each of its real and imaginary parts (lru/model.py:59-69)
        self.B_re = nn.Parameter(torch.randn(state_size, width) / math.sqrt(2 * width))
        self.B_im = nn.Parameter(torch.randn(state_size, width) / math.sqrt(2 * width))
        # C ~ N(0, 1/N) in each part (lru/model.py:70-79); D ~ N(0, 1) (lru/model.py:80)
        self.C_re = nn.Parameter(torch.randn(width, state_size) / math.sqrt(state_size))
        self.C_im = nn.Parameter(torch.randn(width, state_size) / math.sqrt(state_size))
        self.D = nn.Parameter(torch.randn(width))

    def eigenvalues(self) -> torch.Tensor:
        """Λ's diagonal (N,), complex."""
        return ring_eigenvalues(self.nu_log, self.theta_log)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        """ν, θ, γ: the paper trains them with a smaller learning rate and no weight decay."""
        return [self.nu_log, self.theta_log, self.gamma_log]

    def kernel(self, length: int) -> torch.Tensor:
        """The impulse response as (T, H, H): y = K * u + D u with y_k = Σ_j u_j K_(k-j) and K_l = Re(C diag(γ λ^l)
        B)^T, l = 0..length-1 (models/fft_convolution.py's row layout), a view of (H, H, T) memory: time innermost,
        as the FFT reads it."""
        gamma = self.gamma_log.exp().unsqueeze(-1)
        gb_re, gb_im = (gamma * self.B_re).t().unsqueeze(1), (gamma * self.B_im).t().unsqueeze(1)  # γ B, (H_in, 1, N)
        c_re, c_im = self.C_re.unsqueeze(0), self.C_im.unsqueeze(0)  # (1, H_out, N)
        # (C γ B)^T per state as an (H_in x H_out, N) matrix, its real and imaginary parts side by side
        mixing_re, mixing_im = gb_re * c_re - gb_im * c_im, gb_re * c_im + gb_im * c_re
        powers = eigenvalue_powers(self.nu_log, self.theta_log, length)  # (N, T)
        # Re(Σ_n (C γ B)_n λ_n^l) as one real product: Re(M) Re(P) - Im(M) Im(P)
        mixing = torch.cat([mixing_re, -mixing_im], dim=-1).flatten(0, 1)  # (H x H, 2N)
        width = self.D.shape[0]
        return (mixing @ torch.cat([powers.real, powers.imag])).view(width, width, length).permute(2, 0, 1)

    def convolves(self, batch: int) -> bool:
        """Whether `mode` takes the convolution for a batch of this size. 'auto' compares the work per step: the
        convolution's H^2 (N + B) (the kernel's H x H entries from N states, one H x H product per sequence and
        frequency), counted 5/4 times for its FFTs and layout copies, against the scan's N B (2 H + 32) (the input
        and output products, 2 H per state and sequence, and the chunked scan's products, about 32). At N = 128 and
        batch 50 the convolution is taken up to H = 70; the measured crossover on this CPU was H = 70 at 9ffaf0d
        (docs/benchmarks.md)."""
        if self.mode != "auto":
            return self.mode == "convolution"
        width, states = self.D.shape[0], self.state_count
        return 5 * width * width * (states + batch) <= 4 * states * batch * (2 * width + 32)

    def last_output(self, u: torch.Tensor) -> torch.Tensor:
        """y_{T-1} alone (B, H) from u (B, T, H) and a zero state: Re(C x_{T-1}) + D u_{T-1} with x_{T-1} = γ ⊙ B
        Σ_j λ^(T-1-j) u_j (the recurrence unrolled, lru/model.py:91, 93), one product over time instead of a scan
        or a convolution of every step (the block's last_step)."""
        batch, steps, width = u.shape
        powers = eigenvalue_powers(self.nu_log, self.theta_log, steps).flip(-1)  # λ^(T-1-j), j = 0..T-1 (N, T)
        u_time = u.transpose(0, 1).reshape(steps, batch * width)  # (T, B*H)
        summed = torch.complex(powers.real @ u_time, powers.imag @ u_time).view(-1, batch, width)  # (N, B, H)
        gains = self.gamma_log.exp().unsqueeze(-1) * torch.complex(self.B_re, self.B_im)  # γ ⊙ B (N, H)
        final = (summed * gains.unsqueeze(1)).sum(-1)  # x_{T-1} (N, B)
        return (self.C_re @ final.real - self.C_im @ final.imag).t() + self.D * u[:, -1]  # Re(C x) + D u

    def forward(
        self, u: torch.Tensor, state: torch.Tensor | None = None, want_final: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """y (B, T, H) and the last state x_{T-1} (B, N) from u (B, T, H) and x_{-1} = `state` (B, N) or zeros.

        Without a state in or out, the convolution y = K * u + D u (`mode`, `convolves`) gives y and no state
        (None); otherwise the scan gives every state, and the last one costs nothing."""
        if state is None and not want_final and self.convolves(u.shape[0]):
            return causal_convolution(u, self.kernel(u.shape[1])) + self.D * u, None
        batch, steps, width = u.shape
        gamma = self.gamma_log.exp().unsqueeze(-1)
        u_first = u.permute(2, 0, 1).reshape(width, -1)  # (H, B*T): the states come out first, time last
        # γ ⊙ (B u_k) for every k at once, its real and imaginary parts as two real products (lru/model.py:85, 89)
        inputs = torch.complex((gamma * self.B_re) @ u_first, (gamma * self.B_im) @ u_first).view(-1, batch, steps)
        initial = None if state is None else state.t()
        x = diagonal_scan(self.eigenvalues(), inputs, initial)  # x_k = Λ x_{k-1} + γ ⊙ (B u_k) (lru/model.py:91)
        readout = torch.complex(self.C_re, self.C_im).t()  # (N, H)
        # Re(C x_k) + D u_k (lru/model.py:93), all steps in one product
        y = (x.reshape(x.shape[0], -1).t() @ readout).real.view(batch, steps, width) + self.D * u
        return y, x[..., -1].t()


class LRU(DiagonalStateSpaceLayer):
    """Linear Recurrent Unit block: diagonal complex linear recurrence |λ| < 1, then GELU, GLU, skip (H = hidden_size).

    One layer is one block of models/ssm_block.py, [LayerNorm] -> LRU -> GELU -> GLU -> skip.

    state_size: N, the complex state's size (minimal-LRU run_train.py:44's d_hidden 128).
    r_min: smallest |λ| of the ring initialisation (lru/model.py:46, the paper's Appendix A: 0).
    r_max: largest |λ| of the ring, at most 1 (lru/model.py:47: 1).
    max_phase: phases θ drawn in [0, max_phase] (lru/model.py:48: 6.28).
    norm: 'layer' (LayerNorm, lru/model.py:104) or 'batch' (BatchNorm over the batch and the steps, as
        run_train.py:57 for the LRA runs; it mixes sequences, so h_n carries on exactly only in eval mode).
    prenorm: normalise before the LRU (true, run_train.py:58) or after the skip sum.
    block_dropout: dropout after the GELU and after the GLU, whole features per sequence (lru/model.py:103: 0).
    mode: how y is computed; every mode gives the same y (tests/test_lru_s4d.py). 'recurrence': the parallel scan
        of the states, as the paper's code (lru/model.py:91). 'convolution': the LTI system's impulse response
        K_l = Re(C diag(γ λ^l) B) applied by FFT, with no state formed. 'auto' (default): the convolution when it
        is the less work (LinearRecurrentUnit.convolves: H up to about 70 at N = 128, batch 50). A state carried in
        or out (step-by-step use, `initial_state`, `return_state`) always takes the scan.
    Parameter groups: `recurrent` (ν, θ, γ: by default Adam at half the base rate, no weight decay, as
    run_train.py:69-71 and train_helpers.py:91-99), `other` (B, C, D, the GLU, the norm, the encoder).
    """

    layer_doc = (
        f"Linear Recurrent Unit blocks (Orvieto et al. 2023), one per layer. {SSM_STATE} "
        "Groups: recurrent (nu, theta, gamma; Adam 5e-4 by default), other. Zero initial state."
    )

    # the reference's 'ssm' group: Adam (no weight decay) at lr_factor 0.5 x lr_base 1e-3 (run_train.py:69, 71;
    # train_helpers.py:97-99); its other parameters take AdamW 1e-3 with weight decay 0.05 (run_train.py:79)
    default_optimizers = {"recurrent": {"name": "adam", "lr": 5e-4}}
    readout_init = "lecun_normal"  # the decoder is a flax nn.Dense (lru/model.py:191)

    @checks_choices
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        state_size: int = 128,
        r_min: float = 0.0,
        r_max: float = 1.0,
        max_phase: float = 6.28,
        norm: Literal["layer", "batch"] = "layer",
        prenorm: bool = True,
        block_dropout: float = 0.0,
        mode: Literal["auto", "convolution", "recurrence"] = "auto",
    ):
        state_size = positive_int("state_size", state_size)
        r_min, r_max = real_number("r_min", r_min), real_number("r_max", r_max)
        max_phase = real_number("max_phase", max_phase)
        if not 0.0 <= r_min <= r_max <= 1.0:
            raise ConfigError(
                f"model.family_args.r_min = {r_min} and r_max = {r_max} must satisfy "
                f"0 <= r_min <= r_max <= 1 (the ring |λ| is drawn on)"
            )
        if not max_phase > 0.0:
            raise ConfigError(
                f"model.family_args.max_phase = {max_phase} must be positive (phases are drawn in [0, max_phase])"
            )
        if norm == "layer":
            normalisation = nn.LayerNorm(hidden_size, eps=1e-6)  # flax.linen.LayerNorm's epsilon 1e-6
        else:  # flax.linen.BatchNorm: momentum 0.99 (torch's 0.01), epsilon 1e-5 (flax/linen/normalization.py)
            normalisation = FeatureBatchNorm(hidden_size, eps=1e-5, momentum=0.01)
        recurrence = LinearRecurrentUnit(hidden_size, state_size, r_min, r_max, max_phase, mode)
        # flax's nn.gelu is the tanh approximation (jax.nn.gelu's approximate=True), lru/model.py:126
        super().__init__(
            input_size, hidden_size, recurrence, normalisation, prenorm, block_dropout, nn.GELU(approximate="tanh")
        )
        for linear in (self.encoder, self.block.glu):  # flax nn.Dense: lecun-normal kernel, zero bias
            if isinstance(linear, nn.Linear):  # lru/model.py:111-112 (GLU), 147 (encoder)
                lecun_normal_(linear.weight)
                nn.init.zeros_(linear.bias)
