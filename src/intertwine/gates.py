"""Binary activation patterns (the gates of a ReLU network) on a probe set, for the
excitation-pullback paper's Hypothesis 1 (early emergence of stable excitation patterns): recorded
while the zoo trains, so kept apart from :mod:`intertwine.pullback`, whose soft backward passes the
zoo never runs (the zoo's code identity reaches this module only).

A *call site* is named as :mod:`intertwine.pullback` names it: a ReLU or LeakyReLU module by its
name, its k-th call in one forward pass ``name@k`` (torchvision's Bottleneck calls one ``relu``
three times); a functional ``F.relu`` / ``torch.relu`` / ``Tensor.relu`` / ``F.leaky_relu`` call by
the module whose forward makes it, ``owner.relu()`` (``relu()`` at the root). A module's own
functional call is its call, not a second site.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

__all__ = [
    "chance_agreement",
    "gate_patterns",
    "path_correlations",
    "pattern_agreement",
    "settling_rows",
]

_GATE_MODULES = (nn.ReLU, nn.LeakyReLU)
_GATE_FUNCTIONS = {
    **{f: "relu" for f in (F.relu, torch.relu, Tensor.relu, F.relu_, torch.relu_, Tensor.relu_)},
    **{f: "leaky_relu" for f in (F.leaky_relu, F.leaky_relu_)},
}


class _Recorder(TorchFunctionMode):
    """Calls ``record(site, pre_activation)`` at every ReLU-like call of ``model``'s forward passes."""

    def __init__(self, model: nn.Module, record) -> None:
        super().__init__()
        self.model, self.record = model, record
        self.calls: Counter = Counter()
        self.running: list[str] = []
        self.inside = 0  # > 0 while a gate module runs: its own functional call is its call

    def site(self, base: str) -> str:
        self.calls[base] += 1
        return base if self.calls[base] == 1 else f"{base}@{self.calls[base]}"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        label = _GATE_FUNCTIONS.get(func)
        if label is not None and not self.inside and args:
            owner = self.running[-1] if self.running else ""
            self.record(self.site(f"{owner}.{label}()" if owner else f"{label}()"), args[0])
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        handles = []

        def enter(name, gate):
            def hook(_module, inputs):
                if not name:  # the root: a new forward pass
                    self.calls.clear()
                    self.running.clear()
                self.running.append(name)
                if gate:
                    self.record(self.site(name), inputs[0])
                    self.inside += 1

            return hook

        def leave(gate):
            def hook(_module, _inputs, _output):
                if self.running:
                    self.running.pop()
                if gate:
                    self.inside -= 1

            return hook

        try:
            for name, module in self.model.named_modules():
                gate = isinstance(module, _GATE_MODULES)
                handles.append(module.register_forward_pre_hook(enter(name, gate)))
                handles.append(module.register_forward_hook(leave(gate), always_call=True))
            with self:
                yield
        finally:
            for handle in handles:
                handle.remove()


@torch.no_grad()
def gate_patterns(model: nn.Module, images: Tensor, batch_size: int = 256) -> dict[str, Tensor]:
    """The binary activation pattern of ``model`` on ``images``: at every ReLU or LeakyReLU call
    site (module docstring), whether each pre-activation is positive.

    Parameters
    ----------
    model : the network, run in eval mode (every module's mode restored afterwards; nothing else
        changes, and no random number is drawn).
    images : (N, ...) inputs, moved to the model's first parameter's device and dtype.
    batch_size : images per forward pass.

    Returns
    -------
    Call site name -> CPU bool tensor (N, ...) of the pre-activation's shape, in call order;
    max-pools are not gates. A model without a ReLU call gives an empty dict.
    """
    parameter = next(model.parameters())
    parts: dict[str, list[Tensor]] = {}

    def record(site: str, z: Tensor) -> None:
        parts.setdefault(site, []).append((z.detach() > 0).cpu())

    modes = [(module, module.training) for module in model.modules()]
    try:
        model.eval()
        with _Recorder(model, record).installed():
            for start in range(0, len(images), batch_size):
                model(images[start : start + batch_size].to(parameter.device, parameter.dtype))
    finally:
        for module, training in modes:
            module.training = training
    return {site: torch.cat(chunks) for site, chunks in parts.items()}


# --- Hypothesis 1: do gate patterns settle during training? --------------------------------------------


def pattern_agreement(a: Tensor, b: Tensor) -> float:
    """The fraction of gates (image x unit) that two binary activation patterns (bool, same shape)
    share; 1 for identical patterns.

    Parameters
    ----------
    a, b : Tensor
        Two binary patterns of one shape (N, ...).

    Returns
    -------
    float
        The fraction of equal entries, in [0, 1].
    """
    if a.shape != b.shape:
        raise ValueError(f"pattern_agreement: patterns of shapes {tuple(a.shape)} and {tuple(b.shape)}")
    return (a == b).double().mean().item()


def chance_agreement(a: Tensor, b: Tensor) -> float:
    """The agreement two patterns would have by chance with their units' rates: per unit u (every
    dim but the first, the images), ``p_a p_b + (1 - p_a)(1 - p_b)`` with p the fraction of images
    on which u is active, averaged over units. A unit on (or off) for every image in both patterns
    agrees by chance too: this is the floor that :func:`pattern_agreement` should be read against.

    Parameters
    ----------
    a, b : Tensor
        Two binary patterns of one shape (N, ...), images on dim 0.

    Returns
    -------
    float
        The chance agreement, averaged over units, in [0, 1].
    """
    if a.shape != b.shape:
        raise ValueError(f"chance_agreement: patterns of shapes {tuple(a.shape)} and {tuple(b.shape)}")
    pa, pb = a.double().mean(0), b.double().mean(0)
    return (pa * pb + (1 - pa) * (1 - pb)).mean().item()


def path_correlations(a: dict[str, Tensor], b: dict[str, Tensor]) -> Tensor:
    """Per image x, the Pearson correlation rho(x) of two gating tensor fields: the rank-1 tensors
    G~(x) = (x) over call sites of each site's binary gates (Satkiewicz's Equations 13-14, one
    factor per ReLU call site), correlated over every path (one unit per site), without building
    the tensor: over a product of sites the mean of a (x) b factorises into the sites' means.

    With m_a = prod_s mean(a_s), m_b likewise and m_ab = prod_s mean(a_s b_s) (binary, so each
    tensor's mean square is its mean), rho = (m_ab - m_a m_b) / sqrt(m_a (1 - m_a) m_b (1 - m_b)).
    An image whose tensor is constant in either field (a site with no gate open, or every gate of
    every site open) has no correlation: NaN.

    Parameters
    ----------
    a, b : site -> bool pattern (N, ...), the same sites and shapes (e.g. an early and the final
        epoch's ``gate_patterns``).

    Returns
    -------
    Tensor
        (N,) float64, in [-1, 1] or NaN.
    """
    if set(a) != set(b):
        raise ValueError(f"path_correlations: call sites {sorted(a)} and {sorted(b)} differ")
    m_a = m_b = m_ab = 1.0
    for site, pattern in a.items():
        x, y = pattern.flatten(1).double(), b[site].flatten(1).double()
        if x.shape != y.shape:
            raise ValueError(f"path_correlations: site {site}: shapes {tuple(x.shape)} and {tuple(y.shape)}")
        m_a, m_b, m_ab = m_a * x.mean(1), m_b * y.mean(1), m_ab * (x * y).mean(1)
    spread = (m_a * (1 - m_a) * m_b * (1 - m_b)).sqrt()
    rho = (m_ab - m_a * m_b) / spread
    return torch.where(spread > 0, rho, torch.full_like(rho, math.nan))


#: The quantile of rho(x) over the probe images that reads the paper's "positive for almost every
#: x" (ours: 95 % of the images); NaN (no correlation) counts as not positive.
ALMOST_EVERY = 0.05


#: ``settling_rows``' per-epoch columns of the path correlation.
PATH_COLUMNS = ("path_rho_low", "path_rho_positive", "path_rho_mean")


def _path_summary(rho: Tensor) -> dict:
    """``settling_rows``' per-epoch columns from the per-image correlations ``rho``."""
    defined = torch.nan_to_num(rho, nan=0.0)
    return {
        "path_rho_low": torch.quantile(defined, ALMOST_EVERY).item(),
        "path_rho_positive": (defined > 0).double().mean().item(),
        "path_rho_mean": defined.mean().item(),
    }


def settling_rows(patterns: Sequence[tuple[int, dict[str, Tensor]]]) -> list[dict]:
    """Per recorded epoch and ReLU call site, how far the member's gate pattern on its probe images
    already is the final one (the pattern after the last recorded epoch).

    Parameters
    ----------
    patterns : (epoch, {site: bool pattern (N, ...)}) in training order; epoch 0 is the
        initialisation, the last entry the end of training.

    Returns
    -------
    One dict per (epoch, site): ``epoch``, ``site``, ``units`` (gates per image), ``agreement``
    (:func:`pattern_agreement` with the final pattern), ``chance`` (:func:`chance_agreement` with
    it), ``active`` (fraction of positive pre-activations) and ``final_epoch``; and the epoch's
    correlation of gating tensor fields with the final one (:func:`path_correlations`, the same
    on each of the epoch's rows): ``path_rho_low`` (its ``ALMOST_EVERY`` quantile over the images,
    NaN read as 0), ``path_rho_positive`` (the fraction of images with rho > 0) and
    ``path_rho_mean``.
    """
    if not patterns:
        raise ValueError("settling_rows: no recorded patterns")
    final_epoch, final = patterns[-1]
    rows = []
    for epoch, sites in patterns:
        if set(sites) != set(final):
            raise ValueError(
                f"settling_rows: epoch {epoch} has call sites {sorted(sites)}, the final pattern "
                f"{sorted(final)}: the forward pass changed its ReLU calls during training"
            )
        paths = _path_summary(path_correlations(sites, final))
        for site, pattern in sites.items():
            rows.append(
                {
                    "epoch": int(epoch),
                    "site": site,
                    "units": int(pattern[0].numel()),
                    "agreement": pattern_agreement(pattern, final[site]),
                    "chance": chance_agreement(pattern, final[site]),
                    "active": pattern.double().mean().item(),
                    "final_epoch": int(final_epoch),
                }
                | paths
            )
    return rows
