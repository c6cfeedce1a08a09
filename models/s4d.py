"""S4D: the diagonal state-space layer (Gu, Gupta, Goel, Ré 2022, "On the Parameterization and Initialization of
Diagonal State Space Models", NeurIPS), in the deep state-space block of models/ssm_block.py.

Per feature h of the H = hidden_size features, a diagonal SSM of N/2 complex modes (N = state_size; each mode
stands for a conjugate pair, so the real system has N states), discretised by zero-order hold with step Δ_h:

    x_k = Ā x_{k-1} + B̄ u_k,  y_k = 2 Re(C x_k) + D u_k,  Ā = exp(Δ A),  B̄ = (exp(Δ A) - 1) / A  (B = 1)

A_n = -exp(log_A_real) + i A_imag starts at -1/2 + i π n (S4D-Lin) or -1/2 + i (N/π)(N/(2n+1) - 1) (S4D-Inv).
`mode: convolution` (the official layer's) computes y as the convolution of u with the kernel
K_l = 2 Re(C B̄ Ā^l) by FFT; `mode: recurrence` runs the recurrence itself as a parallel scan
(models/linear_scan.py), as the step-by-step use does; both give the same y and final state. Defaults and
initialisation are the official standalone S4D, state-spaces/s4 models/s4/s4d.py (commit e757cef), cited by line;
S4D-Inv is its full kernel's, src/models/sequence/kernels/dplr.py.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from ortholab.models.base import ConfigError
from ortholab.models.choices import checks_choices
from ortholab.models.fft_convolution import channelwise_causal_convolution
from ortholab.models.linear_scan import diagonal_scan
from ortholab.models.ssm_block import SSM_STATE, DiagonalStateSpaceLayer, positive_int, real_number


def imaginary_parts(init: str, state_size: int, width: int) -> torch.Tensor:
    """Im A_n, n = 0..N/2-1, for every one of `width` features: S4D-Lin or S4D-Inv."""
    n = torch.arange(state_size // 2, dtype=torch.get_default_dtype()).expand(width, -1)
    if init == "lin":
        return math.pi * n  # S4D-Lin: π n (s4d.py:27; dplr.py:69-70)
    return state_size / math.pi * (state_size / (2 * n + 1) - 1)  # S4D-Inv: (N/π)(N/(2n+1) - 1) (dplr.py:71-72)


class DiagonalStateSpace(nn.Module):
    """The S4D layer's SSM over (B, T, H) inputs (module docstring): kernel, convolution and recurrence.

    Parameters as the official code names them: log_dt (H,), log_A_real, A_imag (H, N/2), C (H, N/2, 2) (the real
    and imaginary parts of the complex C), D (H,).
    """

    def __init__(self, width: int, state_size: int, init: str, dt_min: float, dt_max: float, mode: str):
        super().__init__()
        self.mode = mode
        self.state_count = width * (state_size // 2)  # complex modes of all H features together
        modes = state_size // 2
        # log Δ ~ U[log dt_min, log dt_max] per feature (s4d.py:18-20)
        self.log_dt = nn.Parameter(torch.rand(width) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        complex_dtype = torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64
        self.C = nn.Parameter(torch.view_as_real(torch.randn(width, modes, dtype=complex_dtype)))  # (s4d.py:22-23)
        self.log_A_real = nn.Parameter(torch.log(0.5 * torch.ones(width, modes)))  # Re A = -1/2 (s4d.py:26)
        self.A_imag = nn.Parameter(imaginary_parts(init, state_size, width).clone())  # (s4d.py:27; dplr.py:69-72)
        self.D = nn.Parameter(torch.randn(width))  # (s4d.py:71)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        """Δ and A: the official code trains them with lr min(0.001, lr) and no weight decay (s4d.py:49-59)."""
        return [self.log_dt, self.log_A_real, self.A_imag]

    def discretised(self) -> tuple[torch.Tensor, torch.Tensor]:
        """ΔA and B̄ = (exp(ΔA) - 1) / A, each (H, N/2) (zero-order hold, s4d.py:37-44)."""
        a = torch.complex(-self.log_A_real.exp(), self.A_imag)  # A = -exp(log_A_real) + i A_imag (s4d.py:39)
        dt_a = a * self.log_dt.exp().unsqueeze(-1)  # ΔA (s4d.py:37, 42)
        return dt_a, (dt_a.exp() - 1) / a  # B̄ with B = 1 (s4d.py:44)

    def eigenvalues(self) -> torch.Tensor:
        """Ā = exp(ΔA), every feature's modes (H * N/2,), complex: one of each conjugate pair."""
        return self.discretised()[0].exp().reshape(-1)

    def kernel(self, length: int) -> torch.Tensor:
        """K_l = 2 Re(C B̄ Ā^l), l = 0..length-1, per feature (H, length) (s4d.py:41-45).

        The reference exponentiates every power (exp(ΔA l), s4d.py:43: H N/2 T complex exponentials). Here l = c m + r
        with c = ceil(sqrt(T)): Ā^l = Ā^(c m) Ā^r, so about 2 sqrt(T) exponentials per mode, and the sum over modes
        becomes one (T/c x N/2) @ (N/2 x c) product per feature; the same K to round-off (tests/test_lru_s4d.py),
        several times faster (docs/benchmarks.md)."""
        dt_a, gain = self.discretised()
        chunk = max(1, math.ceil(math.sqrt(length)))
        steps = torch.arange(max(1, -(-length // chunk)), device=dt_a.device)
        near = torch.exp(dt_a.unsqueeze(-1) * torch.arange(chunk, device=dt_a.device))  # Ā^r, r < c (H, N/2, c)
        far = torch.exp(dt_a.unsqueeze(-1) * (chunk * steps))  # Ā^(c m) (H, N/2, T/c)
        weighted = (torch.view_as_complex(self.C) * gain).unsqueeze(-1) * far  # C B̄ Ā^(c m)
        # Σ_n C B̄ Ā^(c m) Ā^r = K_(c m + r) (s4d.py:45), laid out m-major: l = c m + r
        return 2 * torch.einsum("hnm,hnr->hmr", weighted, near).flatten(1)[:, :length].real

    def last_output(self, u: torch.Tensor) -> torch.Tensor:
        """y_{T-1} alone (B, H) from u (B, T, H) and a zero state: Σ_j K_(T-1-j) u_j + D u_{T-1} (s4d.py:97-102 at
        the last step), one weighted sum over time instead of a convolution of every step (the block's last_step)."""
        return (u * self.kernel(u.shape[1]).flip(-1).t()).sum(1) + self.D * u[:, -1]

    def forward(
        self, u: torch.Tensor, state: torch.Tensor | None = None, want_final: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """y (B, T, H) and the last state (B, H * N/2) from u (B, T, H) and the state before the first step (or
        zeros); with want_final false the convolution skips the last state (None)."""
        if self.mode == "recurrence":
            return self._recurrence(u, state)
        return self._convolution(u, state, want_final)

    def _convolution(self, u: torch.Tensor, state: torch.Tensor | None, want_final: bool):
        batch, length, width = u.shape
        signal = u.transpose(1, 2)  # (B, H, T)
        y = channelwise_causal_convolution(signal, self.kernel(length))  # padded to 2T by FFT (s4d.py:97-99)
        y = y + signal * self.D.unsqueeze(-1)  # the D term (s4d.py:102)
        final = None
        if state is not None or want_final:
            # x_k = Ā^(k+1) x_{-1} + Σ_{j<=k} Ā^(k-j) B̄ u_j: the initial state's echo in y, and the last state
            dt_a, gain = self.discretised()
            c, steps = torch.view_as_complex(self.C), torch.arange(length + 1, device=u.device)
            if want_final:
                backwards = torch.exp(dt_a.unsqueeze(-1) * steps[:-1].flip(0))  # Ā^(T-1-j) (H, N/2, T)
                final = gain * torch.einsum("bht,hnt->bhn", signal.to(c.dtype), backwards)
            if state is not None:
                x0 = state.reshape(batch, width, -1)
                y = y + 2 * torch.einsum("bhn,hn,hnt->bht", x0, c, torch.exp(dt_a.unsqueeze(-1) * steps[1:])).real
                if want_final:
                    final = final + torch.exp(dt_a * length) * x0
        return y.transpose(1, 2), (None if final is None else final.reshape(batch, -1))

    def _recurrence(self, u: torch.Tensor, state: torch.Tensor | None):
        batch, length, width = u.shape
        dt_a, gain = self.discretised()
        # B̄ u_k for every feature's modes, states first and time last: (H * N/2, B, T)
        inputs = (gain[..., None, None] * u.permute(2, 0, 1).unsqueeze(1)).reshape(-1, batch, length)
        initial = None if state is None else state.t()
        x = diagonal_scan(dt_a.exp().reshape(-1), inputs, initial)  # x_k = Ā x_{k-1} + B̄ u_k (ssm.py:660-661)
        modes = x.reshape(width, -1, batch, length)
        y = 2 * torch.einsum("hnbt,hn->bth", modes, torch.view_as_complex(self.C)).real  # 2 Re(C x_k) (ssm.py:662-663)
        return y + self.D * u, x[..., -1].t()


class S4D(DiagonalStateSpaceLayer):
    """S4D block: per feature a diagonal SSM discretised by zero-order hold, then GELU, GLU, skip (H = hidden_size).

    One layer is one block of models/ssm_block.py, as the official example's: S4D -> GELU -> GLU -> skip ->
    LayerNorm.

    state_size: N, the real state size per feature, even: N/2 complex modes (s4d.py:63's d_state 64).
    init: Im A's initialisation, 'lin' (S4D-Lin, π n: s4d.py:27) or 'inv' (S4D-Inv, (N/π)(N/(2n+1) - 1):
        dplr.py:71-72); Re A = -1/2 in both.
    dt_min: smallest initial step Δ (s4d.py:14: 0.001).
    dt_max: largest initial step Δ, log-uniform in between (s4d.py:14: 0.1).
    mode: 'convolution' (the kernel by FFT, s4d.py:94-99) or 'recurrence' (a parallel scan over the steps).
    prenorm: LayerNorm before the SSM (true) or after the skip sum (false, example.py:67 and 162).
    block_dropout: dropout after the GELU and after the GLU, whole features per sequence (s4d.py:63: 0).
    Parameter groups: `recurrent` (log Δ, A: by default Adam 1e-3, no weight decay, as example.py:177 and
    s4d.py:57), `other` (C, D, the GLU, the LayerNorm, the encoder).
    """

    layer_doc = (
        f"S4D blocks, diagonal SSMs by zero-order hold (Gu et al. 2022), one per layer. {SSM_STATE} "
        "Groups: recurrent (dt, A; Adam 1e-3 by default), other. Zero initial state."
    )

    # the official example trains Δ and A with lr min(0.001, lr) and weight decay 0 (example.py:177; s4d.py:57), the
    # rest with AdamW lr 0.01, weight decay 0.01 (example.py:52-53, 265)
    default_optimizers = {"recurrent": {"name": "adam", "lr": 1e-3}}
    readout_init = "torch"  # the example's decoder is a default nn.Linear (example.py:183)

    @checks_choices
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        state_size: int = 64,
        init: Literal["lin", "inv"] = "lin",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        mode: Literal["convolution", "recurrence"] = "convolution",
        prenorm: bool = False,
        block_dropout: float = 0.0,
    ):
        state_size = positive_int("state_size", state_size)
        if state_size % 2:
            raise ConfigError(
                f"model.family_args.state_size = {state_size} must be even: S4D keeps N/2 complex "
                f"modes, one of each conjugate pair"
            )
        dt_min, dt_max = real_number("dt_min", dt_min), real_number("dt_max", dt_max)
        if not 0.0 < dt_min <= dt_max:
            raise ConfigError(
                f"model.family_args.dt_min = {dt_min} and dt_max = {dt_max} must satisfy "
                f"0 < dt_min <= dt_max (the initial steps are drawn log-uniformly between them)"
            )
        recurrence = DiagonalStateSpace(hidden_size, state_size, init, dt_min, dt_max, mode)
        # nn.LayerNorm (example.py:179), nn.GELU (s4d.py:77), Conv1d(H, 2H, 1) + GLU (s4d.py:83-86) as a Linear
        super().__init__(
            input_size, hidden_size, recurrence, nn.LayerNorm(hidden_size), prenorm, block_dropout, nn.GELU()
        )
