"""The multiplicative Cayley step of the full-capacity uRNN on the Stiefel manifold of unitary matrices.

Wisdom, Powers, Hershey, Le Roux, Atlas (NeurIPS 2016), Section 4, after Tagare (2011); restated as eq. (1)
of the scoRNN paper (Helfrich, Willmott, Ye 2018). For a loss L of the unitary W = W_re + i W_im, with
G = dL/dW_re + i dL/dW_im (so that dL = Re tr(G^H dW)):

    B = G W^H - W G^H                                     (skew-Hermitian; Wisdom eq. 8 in their code's comments)
    W <- (I + lr/2 B)^-1 (I - lr/2 B) W                   (the Cayley curve; Wisdom eq. 9 in their code's comments)

The Cayley factor is unitary and W stays on the manifold in exact arithmetic, and the first-order change of L is
-lr/2 ||W^H G - G^H W||_F^2 <= 0: a descent step. In floating point nothing pulls W back, so ||W^H W - I||
drifts upward with the number of steps (the scoRNN paper's Section 5.5.1 / Figure 4); this optimizer does
no re-projection, as the paper's code.

`rms_normalize=True` is the `natGradRMS` option of Wisdom's Keras optimizer (their MNIST and TIMIT runs): each
real gradient is first divided elementwise by its running RMS, ms = decay ms + (1 - decay) g^2 from 0,
g / (sqrt(ms) + eps), eps = 1e-8 outside the root. Their copying (memory problem) script steps W by the plain
gradient, the default here.

G is the parameters' .grad as the layer's backward leaves it. Their code reads G from the top blocks of the
gradient of the real 2n x 2n matrix it trains, i.e. only the part of dL/dW that flows through Re h_{t-1}
(stwisdom/urnn custom_optimizers.py:63-73); only the recurrence can split dL/dW so, hence the choice is the
layer's: family fcurnn's `w_gradient`, 'top_blocks' (default, the code's G) or 'full' (G = dL/dW, the direction
of Tagare's Lemma 4 and of the first-order decrease above; models/fcurnn.py compares the two).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.optim import Optimizer

from ortholab.errors import ConfigError


def skew_hermitian_direction(w: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """B = G W^H - W G^H, whose B W is the descent direction on the Stiefel manifold (Tagare 2011, Lemma 4)."""
    gw = g @ w.mH
    return gw - gw.mH


def nearest_unitary(w: torch.Tensor) -> torch.Tensor:
    """U V^H from W = U Sigma V^H: the unitary (orthogonal, for a real W) matrix closest to W in Frobenius norm."""
    u, _, vh = torch.linalg.svd(w)
    return u @ vh


def cayley_step(w: torch.Tensor, b: torch.Tensor, lr: float) -> torch.Tensor:
    """(I + lr/2 B)^-1 (I - lr/2 B) W, by a solve rather than an explicit inverse (Wisdom et al. eq. 9)."""
    eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)
    half = b * (lr / 2)
    return torch.linalg.solve(eye + half, w - half @ w)


class StiefelCayley(Optimizer):
    """Steps the unitary W = W_re + i W_im of each group along the Stiefel manifold by the Cayley transform.

    Every parameter group must hold exactly the two real (n, n) parameters [W_re, W_im], in this order (the
    `recurrent` group of family `fcurnn`). lr is lambda of the step; rms_normalize, decay and eps: see the module.
    The step runs in the parameters' precision (complex64 for float32), as the paper's code.
    """

    def __init__(
        self, params: Iterable, lr: float = 1e-3, rms_normalize: bool = False, decay: float = 0.9, eps: float = 1e-8
    ):
        if not lr > 0:
            raise ConfigError(f"optimizer 'stiefel_cayley': lr = {lr} must be positive")
        if not 0 <= decay < 1:
            raise ConfigError(f"optimizer 'stiefel_cayley': decay = {decay} must lie in [0, 1)")
        super().__init__(params, {"lr": lr, "rms_normalize": rms_normalize, "decay": decay, "eps": eps})
        for group in self.param_groups:
            self._check_group(group["params"])

    @staticmethod
    def _check_group(params: list[torch.Tensor]) -> None:
        shapes = [tuple(p.shape) for p in params]
        if (
            len(params) != 2
            or shapes[0] != shapes[1]
            or len(shapes[0]) != 2
            or shapes[0][0] != shapes[0][1]
            or any(p.is_complex() for p in params)
        ):
            raise ConfigError(
                f"optimizer 'stiefel_cayley' steps one unitary matrix W = W_re + i W_im: its parameter group must be "
                f"exactly the two real (n, n) parameters [W_re, W_im] (family fcurnn's `recurrent` group), got "
                f"{len(params)} parameter(s) of shapes {shapes}; give other groups another optimizer in "
                f"model.optimizers"
            )

    def _gradient(self, p: torch.Tensor, group: dict) -> torch.Tensor:
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        if not group["rms_normalize"]:
            return grad
        state = self.state[p]
        if not state:
            state["mean_square"] = torch.zeros_like(p)
        ms = state["mean_square"].mul_(group["decay"]).addcmul_(grad, grad, value=1 - group["decay"])
        return grad / (ms.sqrt() + group["eps"])  # natGradRMS: RMSProp's scaling before the Cayley step

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            w_re, w_im = group["params"]
            if w_re.grad is None and w_im.grad is None:
                continue
            w = torch.complex(w_re, w_im)
            g = torch.complex(self._gradient(w_re, group), self._gradient(w_im, group))  # G = dL/dRe W + i dL/dIm W
            w_new = cayley_step(w, skew_hermitian_direction(w, g), group["lr"])
            w_re.copy_(w_new.real)
            w_im.copy_(w_new.imag)
        return loss
