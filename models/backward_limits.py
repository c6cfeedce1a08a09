"""What the hand-written backward passes (the BPTTs of models/*recurrence.py and the compiled loops of
models/*_kernels.py) cannot do, refused in one line instead of returning a wrong gradient.

- A second derivative: they compute dL/dinputs with in-place tensor arithmetic on saved states, which autograd
  cannot differentiate again. Called with create_graph=True (torch.autograd.grad(..., create_graph=True),
  gradgradcheck, a Hessian-vector product, a gradient penalty), some returned a gradient with no graph behind it,
  so the second derivative came out zero without a word.
- A second backward through one forward pass, for those that overwrite what they saved.
"""

from __future__ import annotations

import torch


def refuse_create_graph(what: str, source: str) -> None:
    """Inside a backward: refuse create_graph=True (autograd runs a backward with grad mode on exactly then)."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"the {what} ({source}) has a hand-written backward that gives first derivatives "
            "only: a second derivative (create_graph=True, gradgradcheck, a Hessian-vector product, a gradient "
            "penalty) would come out wrong; drop create_graph, or use a family whose recurrence autograd "
            "differentiates (lstm, gru, rnn, nru; lru and s4d with mode: recurrence)"
        )


def refuse_second_backward(ctx, family: str, source: str) -> None:
    """The hand-written backwards write dL/dz over the pre-activations they saved: a second one is refused."""
    if getattr(ctx, "spent", False):
        raise RuntimeError(
            f"the {family} recurrence ({source}) writes dL/dz over the pre-activations it saved, so it "
            "backpropagates once per forward pass: run the forward again instead of calling "
            "backward(retain_graph=True) or torch.autograd.gradcheck through it"
        )
    ctx.spent = True
