"""Gated networks on a residual base: the ResNet-110 rows of Lakshminarayanan & Singh's Table II.

A feature network F and a value network V are two copies of one CIFAR ResNet. Every activation of
V (the stem's, each block's ``act1``, and ``act2`` after the residual sum) multiplies its
pre-activation by the gate of the same site of F: ``1{q > 0}`` (hard) or ``sigmoid(beta q)``
(soft), with q F's pre-activation there. V's skip paths, pools and head are its own, so given its
gates V is linear in its input. Families: ``dgn`` (F is the ReLU ResNet), ``dlgn`` (F's activations
are identities: a linear network). Regimes and value inputs as :class:`~intertwine.models.gated.GatedNet`.
Permuted gate layers, DLGN-SF and gated max-pools belong to the plain stacks (a ResNet has no
max-pools, and its sites differ in shape across stages).

Sites: ``features.<site>`` and ``value.<site>``, ``<site>`` the ResNet's own (``act``,
``layer1.0.act1``, ...). The network is not cut at its sites (stitching and the rotation penalty
act on the plain ResNet).

With hard gates and F's weights equal to V's, a DGN computes its ReLU ResNet exactly: each gate
is ``1{q > 0}`` of the pre-activation V itself computes, so the gated unit is ``relu(q)``
(tests/test_gated_resnet.py).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .gated import GateActivation, GatedBase

__all__ = ["GatedResNet", "SiteGate"]


class SiteGate(GateActivation):
    """V's unit at one site: ``forward(pre)`` multiplies by the gate its network set for the site
    (``GatedResNet.forward`` sets them from F before V runs)."""

    def __init__(self, site: str, gates: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.site = site
        self._gates = gates  # shared with the GatedResNet: a dict, not a module or a buffer

    def forward(self, pre: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        gate = self._gates.get(self.site)
        if gate is None:
            raise RuntimeError(
                f"value site {self.site!r} ran without its gate: call the GatedResNet, not its value network"
            )
        if gate.shape != pre.shape:
            raise ValueError(
                f"value site {self.site!r} has shape {tuple(pre.shape[1:])} but its gate {tuple(gate.shape[1:])}"
            )
        return pre * gate


class GatedResNet(GatedBase):
    """A feature ResNet ``features`` gating a value ResNet ``value`` (module docstring).

    ``make_base`` builds the plain ResNet (a model with ``site_layout()``); it is called twice.
    """

    def __init__(
        self,
        make_base: Callable[[], nn.Module],
        family: str = "dgn",
        regime: str = "standalone",
        beta: float = 10.0,
        value_input: str = "x",
        gate_perm: list[int] | None = None,
        features_from: str | None = None,
        pools: str = "average",
        batch_norm: bool = True,
    ) -> None:
        if family not in ("dgn", "dlgn"):
            raise ValueError(
                f"model option 'gated.family': a residual base takes dgn or dlgn, got {family!r} "
                "(DLGN-SF is built on the plain stacks c4gap, c1gap, vgg16_avg and myrtle)"
            )
        if gate_perm is not None and list(gate_perm) != sorted(gate_perm):
            raise ValueError(
                "model option 'gated.gate_perm': a ResNet's sites differ in shape across stages; "
                "permute gate layers on c4gap"
            )
        if pools != "average":
            raise ValueError("model option 'gated.pools': a ResNet has no max-pools to gate; remove pools")
        super().__init__(family, regime, beta, value_input)
        self._gates: dict[str, torch.Tensor] = {}
        self.value = make_base()
        self.site_names = [name for name, _, _ in self.value.site_layout()]
        for site in self.site_names:
            _set(self.value, site, SiteGate(site, self._gates))
        self.features = make_base()
        self.features.fc = nn.Identity()  # F's gates are all it gives
        if family == "dlgn":
            for site in self.site_names:
                _set(self.features, site, nn.Identity())
        self._freeze_features()

    def gates(self, x: torch.Tensor) -> list[torch.Tensor]:
        """F's gate at every site on input ``x``, in site order (F's pre-activations, read as the
        input of its activation modules)."""
        pre: dict[str, torch.Tensor] = {}
        handles = [
            self.features.get_submodule(site).register_forward_hook(
                lambda module, args, output, site=site: pre.__setitem__(site, args[0])
            )
            for site in self.site_names
        ]
        try:
            self.features(x)
        finally:
            for handle in handles:
                handle.remove()
        return [self._gate(pre[site]) for site in self.site_names]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._gates.clear()
        self._gates.update(zip(self.site_names, self.gates(x)))
        try:
            return self.value(x if self.value_input == "x" else torch.ones_like(x))
        finally:
            self._gates.clear()

    def pieces(self) -> list:
        """No cut sites (module docstring): the whole forward pass is one piece."""
        return [(None, lambda x: (self(x),))]

    #: Why no site has a piece (read by ``models.forward_to``'s error).
    uncut_sites_reason = (
        "a gated ResNet is not cut at its sites: the gates of every layer come from its feature "
        "network on the input, which the value network's later layers would need beside the cut state"
    )

    def site_layout(self) -> list[tuple[str, int, bool]]:
        """Feature sites (F's activations), then value sites, each in forward order."""
        layout = self.value.site_layout()
        return [(f"features.{name}", c, inside) for name, c, inside in layout] + [
            (f"value.{name}", c, inside) for name, c, inside in layout
        ]


def _set(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, attribute = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attribute, module)
