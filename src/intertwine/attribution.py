"""Excitation pullbacks where attribution users work: a Captum attribution and Zennit rules.

Optional: ``pip install intertwine[attribution]`` (Captum, Zennit, Quantus). Nothing else in the
package imports this module.

* :class:`ExcitationPullback` is a Captum ``GradientAttribution``: ``attribute(inputs, target=)``
  returns :func:`intertwine.pullback.pullback` of the targets, so Captum's and Quantus's tooling
  (``NoiseTunnel``, metrics, visualisation) take it as they take ``Saliency``.
* :class:`SoftMaxPool` is a Zennit rule (a ``Hook``) giving a max-pool the gradient of the
  softmax pool at temperature T (the pullback's, ``pullback.soft_max_pool2d`` and
  ``soft_adaptive_max_pool2d``); with Zennit's
  ``ReLUBetaSmooth`` at ``beta = 1 / T`` on every ReLU, :func:`pullback_composite` is the global-T
  pullback as a Zennit composite. On a network whose every ReLU and max-pool is a module called
  once (no functional calls), its input gradient equals ``pullback(model, x, classes, T)``
  (tests/test_attribution.py).
"""

from __future__ import annotations

import torch
from captum.attr import GradientAttribution
from torch import nn
from zennit.composites import LayerMapComposite
from zennit.core import Hook
from zennit.rules import ReLUBetaSmooth

from intertwine.pullback import pullback, soft_adaptive_max_pool2d, soft_max_pool2d

__all__ = ["ExcitationPullback", "SoftMaxPool", "pullback_composite"]


class ExcitationPullback(GradientAttribution):
    """Captum's interface to :func:`intertwine.pullback.pullback`.

    Parameters
    ----------
    model : the network (the ``forward_func``; an ``nn.Module``).
    temperature : the global T.
    options : further keyword arguments of ``pullback`` (``mode``, ``temperatures``,
        ``functional``, ``pool_padding``).
    """

    def __init__(self, model: nn.Module, temperature: float = 0.3, **options) -> None:
        super().__init__(model)
        self.temperature, self.options = temperature, options

    def attribute(self, inputs: torch.Tensor, target=None) -> torch.Tensor:
        """The pullback of logit ``target`` (an int, or one per input) at each input, shaped as
        ``inputs``. A target is needed: the pullback explains one logit."""
        if target is None:
            raise ValueError(
                "ExcitationPullback.attribute: give target (the class whose logit to explain, an int "
                "or one per input)"
            )
        if isinstance(target, list | tuple):
            target = torch.as_tensor(target)
        return pullback(self.forward_func, inputs, target, self.temperature, **self.options)


class SoftMaxPool(Hook):
    """A Zennit rule for ``nn.MaxPool2d`` and ``nn.AdaptiveMaxPool2d``: the hard max in the
    forward pass, the gradient of the softmax pool at ``temperature`` in the backward pass
    (zero-padded windows take part as zeros, the paper's Listing 2, as the pullback's default)."""

    def __init__(self, temperature: float = 0.3) -> None:
        super().__init__()
        self.temperature = temperature

    def copy(self) -> "SoftMaxPool":
        return self.__class__(self.temperature)

    def forward(self, module, input, output):
        self.stored_tensors["input"] = input

    def backward(self, module, grad_input, grad_output):
        x = self.stored_tensors["input"][0].detach().requires_grad_(True)
        m = module
        with torch.enable_grad():
            if isinstance(m, nn.AdaptiveMaxPool2d):
                pooled = soft_adaptive_max_pool2d(x, self.temperature, m.output_size)
            else:
                pooled = soft_max_pool2d(
                    x, self.temperature, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode
                )
            (grad,) = torch.autograd.grad(pooled, x, grad_output[0])
        return (grad,)


def pullback_composite(temperature: float = 0.3) -> LayerMapComposite:
    """The global-T excitation pullback as a Zennit composite: ``ReLUBetaSmooth(1 / T)`` on every
    ``nn.ReLU``, :class:`SoftMaxPool` on every ``nn.MaxPool2d`` and ``nn.AdaptiveMaxPool2d``."""
    pool = SoftMaxPool(temperature)
    return LayerMapComposite(
        [
            (nn.ReLU, ReLUBetaSmooth(beta_smooth=1.0 / temperature)),
            (nn.MaxPool2d, pool),
            (nn.AdaptiveMaxPool2d, pool),
        ]
    )
