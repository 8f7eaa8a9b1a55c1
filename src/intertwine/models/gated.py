"""Gated networks (Lakshminarayanan & Singh, "Disentangling deep neural networks with rectified
linear units using duality"): a feature network F computes gates, a value network V of the same
architecture computes the output with them.

F's pre-activations q_l (conv + BN outputs) give the gates G_l = sigmoid(beta q_l) (soft) or
1{q_l > 0} (hard). V computes z_0 = x (or ones, ``value_input: ones``), then per layer
z_l = G_{pi(l)} * BN(conv z_{l-1}) (a gated linear unit: gate times pre-activation), the same pools
(average pools: V must be linear given its gates) and the same head. pi is a fixed permutation of
the gate layers (``gate_perm``), kept for training and test; permuted layers need equal shapes.

Pools: ``pools: average`` (the paper's, the default) makes every pool of V (and of a linear F) an
average pool. ``pools: gated_max`` [ours] keeps a base architecture's max-pools as *gated* max-pools
in V: each pooled unit takes V's value at the position F's activation is largest in the window
(the global max-pool likewise), a gate like the others, so V stays linear given its gates. On
``shapes`` it is what lets a gated Myrtle learn in a CPU budget: 150 steps of the plain Myrtle at
width 0.125 reach 86 % training accuracy with max-pools and 27 % with average pools.

Families:

- ``dgn``: F is the ReLU network itself (its pools as they are, so that the FL regime can use a
  trained zoo member of the plain architecture as F);
- ``dlgn``: F is linear (identity activations, average pools only: a Myrtle's max-pools and
  global max-pool become average pools);
- ``dlgn_sf``: each gate layer is one linear map (3x3 conv + BN) of the input, average-pooled to
  that layer's resolution (Section 3.3: "the feature network is a collection of shallow single
  matrix multiplications"; the average pool to each layer's resolution is ours).

Regimes: ``standalone`` (F and V trained together, soft gates), ``fl`` (F is a trained zoo member
of the plain architecture, named by ``features_from``, frozen, hard gates; the training job loads
it), ``fr`` (F frozen at its random initialisation, hard gates). A frozen F stays in eval mode.

Sites: ``features.act<l>`` (F's activations: ReLU for dgn, the identity for the linear families,
whose output is q_l itself) and ``value.act<l>`` (V's gated units), named as in the plain model.
Stitching cuts the value network: the state at ``value.act<l>`` is (z_l, x), and the network
after the cut computes its own gates from x, so the stitched network is the back model with its
value representation at l replaced by the bridged front one. Feature sites are read (similarity,
symmetry) but not cut: the gates of the layers before a cut would have to come from one model and
the value units they gate from the other.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Mapping

import torch
from torch import nn

__all__ = [
    "FAMILIES",
    "GATED_OPTIONS",
    "GateActivation",
    "GatedBase",
    "GatedNet",
    "REGIMES",
    "VALUE_INPUTS",
    "check_gated",
]

FAMILIES = ("dgn", "dlgn", "dlgn_sf")
REGIMES = ("standalone", "fl", "fr")
VALUE_INPUTS = ("x", "ones")

#: The keys of a ``gated`` spec block and their defaults.
GATED_OPTIONS: Mapping[str, Any] = {
    "family": "dgn",
    "regime": "standalone",
    "beta": 10.0,
    "value_input": "x",
    "gate_perm": None,
    "features_from": None,
    "pools": "average",
}
POOLS = ("average", "gated_max")


def check_gated(block: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A ``gated`` spec block validated and filled with defaults (None stays None: a plain model).
    Errors name the key (``gated.family``, ...) and what it accepts."""
    if block is None:
        return None
    if not isinstance(block, Mapping):
        raise ValueError(
            f"model option 'gated': expected a mapping of {', '.join(GATED_OPTIONS)}, got {block!r}"
        )
    unknown = [key for key in block if key not in GATED_OPTIONS]
    if unknown:
        raise ValueError(
            f"model option 'gated': unknown key(s) {unknown}; allowed: {', '.join(GATED_OPTIONS)}"
        )
    out = {key: block.get(key, default) for key, default in GATED_OPTIONS.items()}
    for key, allowed in (
        ("family", FAMILIES),
        ("regime", REGIMES),
        ("value_input", VALUE_INPUTS),
        ("pools", POOLS),
    ):
        if out[key] not in allowed:
            raise ValueError(
                f"model option 'gated.{key}': expected one of {', '.join(allowed)}, got {out[key]!r}"
            )
    beta = out["beta"]
    if not isinstance(beta, numbers.Real) or isinstance(beta, bool) or not 0 < beta < float("inf"):
        raise ValueError(f"model option 'gated.beta': expected a positive number, got {beta!r}")
    out["beta"] = float(beta)
    perm = out["gate_perm"]
    if perm is not None:
        if not isinstance(perm, (list, tuple)) or sorted(perm) != list(range(len(perm))):
            raise ValueError(
                f"model option 'gated.gate_perm': expected a permutation of 0..L-1 (value layer l uses "
                f"gate layer gate_perm[l]) or null, got {perm!r}"
            )
        out["gate_perm"] = [int(i) for i in perm]
    if (out["regime"] == "fl") != (out["features_from"] is not None):
        raise ValueError(
            "model option 'gated.features_from': the FL regime takes its feature network from a trained "
            "zoo variant of the plain architecture, named by features_from, and only FL does "
            f"(regime {out['regime']!r}, features_from {out['features_from']!r})"
        )
    if out["regime"] == "fl" and out["family"] != "dgn":
        raise ValueError(
            f"model option 'gated.family': the FL regime's feature network is a trained ReLU network, "
            f"so its family is dgn, got {out['family']!r}"
        )
    if out["pools"] == "gated_max" and out["gate_perm"] not in (None, sorted(out["gate_perm"] or [])):
        raise ValueError(
            "model option 'gated.gate_perm': a permuted gate layer would gate units whose gated max-pools "
            "select by another layer; permute gates with pools: average"
        )
    if out["features_from"] is not None and not isinstance(out["features_from"], str):
        raise ValueError(
            f"model option 'gated.features_from': expected a variant name, got {out['features_from']!r}"
        )
    return out


class GateActivation(nn.Module):
    """A value network's unit: the pre-activation times its gate (a GaLU), ``forward(pre, gate)``."""

    def forward(self, pre: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return pre * gate


class GatedMaxPool(nn.Module):
    """A value network's max-pool whose selection is a gate: ``forward(z, index)`` takes each
    pooled unit's value at ``index`` (flat positions per channel, as ``max_pool2d`` returns them
    for the feature network's activation)."""

    def forward(self, z: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return z.flatten(2).gather(2, index.flatten(2)).view(index.shape)


class _ShallowFeatures(nn.Module):
    """DLGN-SF's feature network: gate layer l is conv_l + bn_l of the input average-pooled to
    layer l's resolution (``input_pool<l>``)."""

    def __init__(self, layers: list[tuple[int, int]], in_channels: int, batch_norm: bool) -> None:
        super().__init__()
        for i, (width, pools_before) in enumerate(layers, start=1):
            self.add_module(
                f"input_pool{i}", nn.AvgPool2d(2**pools_before) if pools_before else nn.Identity()
            )
            self.add_module(f"conv{i}", nn.Conv2d(in_channels, width, kernel_size=3, padding=1))
            self.add_module(f"bn{i}", nn.BatchNorm2d(width) if batch_norm else nn.Identity())
            self.add_module(f"act{i}", nn.Identity())


def _replace(model: nn.Module, name: str | None, module: nn.Module) -> None:
    if name is not None:
        setattr(model, name, module)


def _linear_pools(model: nn.Module) -> None:
    """Max-pools become average pools of the same size (a linear network, or a value network)."""
    for _, _, _, pool in model.layer_names():
        if pool is not None and isinstance(model.get_submodule(pool), nn.MaxPool2d):
            size = model.get_submodule(pool).kernel_size
            _replace(model, pool, nn.AvgPool2d(size))
    if isinstance(model.global_pool, nn.AdaptiveMaxPool2d):
        model.global_pool = nn.AdaptiveAvgPool2d(1)


class GatedBase(nn.Module):
    """What every gated network shares, whatever its base (:class:`GatedNet` on the plain stacks,
    :class:`~intertwine.models.gated_resnet.GatedResNet` on a ResNet): the gating options, the gate
    ``1{q > 0}`` (hard, the FL and FR regimes) or ``sigmoid(beta q)`` (soft) of a feature
    pre-activation q, and a frozen feature network ``features`` in the hard regimes, which stays in
    eval mode whatever mode the network is put in (it keeps its batch-norm statistics).

    A subclass calls ``super().__init__(family, regime, beta, value_input)`` before it adds modules
    and :meth:`_freeze_features` once ``features`` is built."""

    def __init__(self, family: str, regime: str, beta: float, value_input: str) -> None:
        super().__init__()
        self.family, self.regime, self.beta, self.value_input = family, regime, beta, value_input
        self.hard = regime != "standalone"

    def _freeze_features(self) -> None:
        if self.hard:
            self.features.requires_grad_(False)
            self.features.eval()

    def train(self, mode: bool = True):
        super().train(mode)
        if self.hard:  # a frozen feature network keeps its batch-norm statistics
            self.features.eval()
        return self

    def _gate(self, q: torch.Tensor) -> torch.Tensor:
        return (q > 0).to(q.dtype) if self.hard else torch.sigmoid(self.beta * q)


class GatedNet(GatedBase):
    """A feature network ``features`` gating a value network ``value`` (see the module docstring).

    ``make_base`` builds the plain architecture (a model with ``layer_names()``, ``global_pool``,
    ``flatten`` and ``fc``, e.g. :class:`~intertwine.models.plain.ConvStack` or Myrtle); it is
    called twice, for F and V.
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
        super().__init__(family, regime, beta, value_input)
        self.pools = pools
        self.value = make_base()
        layers = self.value.layer_names()
        self.gate_perm = list(range(len(layers))) if gate_perm is None else list(gate_perm)
        if len(self.gate_perm) != len(layers):
            raise ValueError(
                f"model option 'gated.gate_perm': the network has {len(layers)} gated layers, "
                f"got a permutation of {len(self.gate_perm)}"
            )
        widths = [self.value.get_submodule(conv).out_channels for conv, *_ in layers]
        for layer, gate in enumerate(self.gate_perm):
            if widths[layer] != widths[gate]:
                raise ValueError(
                    f"model option 'gated.gate_perm': value layer {layer + 1} ({widths[layer]} channels) "
                    f"cannot use the gates of layer {gate + 1} ({widths[gate]} channels); permute only "
                    "layers of equal shape (c4gap's four layers are)"
                )
        # the base's max-pools, which pools: gated_max keeps as gated max-pools in V
        self.max_pools = {
            pool
            for *_, pool in layers
            if pool is not None and isinstance(self.value.get_submodule(pool), nn.MaxPool2d)
        }
        self.global_max = isinstance(self.value.global_pool, nn.AdaptiveMaxPool2d)
        if pools == "gated_max":
            for pool in self.max_pools:
                _replace(self.value, pool, GatedMaxPool())
            if self.global_max:
                self.value.global_pool = GatedMaxPool()
        else:
            self.max_pools, self.global_max = set(), False
        _linear_pools(self.value)
        for _, _, act, _ in layers:
            _replace(self.value, act, GateActivation())

        if family == "dlgn_sf":
            in_channels = self.value.get_submodule(layers[0][0]).in_channels
            pools, before = [], 0
            for _, _, _, pool in layers:
                pools.append(before)
                if pool is not None and not isinstance(self.value.get_submodule(pool), nn.Identity):
                    before += 1
            self.features = _ShallowFeatures(list(zip(widths, pools)), in_channels, batch_norm)
        else:
            self.features = make_base()
            self.features.fc = nn.Identity()  # F's gates are all it gives; an FL member's head is dropped
            if family == "dlgn":
                _linear_pools(self.features)
                for _, _, act, _ in layers:
                    _replace(self.features, act, nn.Identity())
        self._freeze_features()

    # --- the two networks ---------------------------------------------------------------------

    def gates(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The gates of every layer of F on input x, in F's layer order."""
        return self.gating(x)[0]

    def gating(
        self, x: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor | None], torch.Tensor | None]:
        """F on x: the gates of every layer, the selections of the gated max-pool after each layer
        (None where there is none) and of the global one (None without it), in F's layer order."""
        gates, selections, h = [], [], x
        for i, (conv, norm, act, pool) in enumerate(self.value.layer_names(), start=1):
            if self.family == "dlgn_sf":
                f = self.features
                q = getattr(f, f"bn{i}")(getattr(f, f"conv{i}")(getattr(f, f"input_pool{i}")(x)))
                a = getattr(f, f"act{i}")(q)  # the site's module runs, so hooks read q there
            else:
                q = self.features.get_submodule(norm)(self.features.get_submodule(conv)(h))
                h = a = self.features.get_submodule(act)(q)
                if pool is not None:
                    h = self.features.get_submodule(pool)(h)
            gates.append(self._gate(q))
            selected = pool in self.max_pools
            # a selection is a gate: indices of the detached activation, no gradient through them
            pooled, index = (
                nn.functional.max_pool2d(a.detach(), 2, return_indices=True) if selected else (a, None)
            )
            selections.append(index)
            if self.family == "dlgn_sf":  # no chain: F's activation pooled as V's, for the global pool
                h = pooled if selected or pool is None else self.value.get_submodule(pool)(a)
        last = h
        selection = (
            nn.functional.adaptive_max_pool2d(last.detach(), 1, return_indices=True)[1]
            if self.global_max
            else None
        )
        return gates, selections, selection

    def _value_input(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.value_input == "x" else torch.ones_like(x)

    def _value_layer(self, layer: int, z: torch.Tensor, gates: list[torch.Tensor]) -> torch.Tensor:
        conv, norm, act, _ = self.value.layer_names()[layer]
        pre = self.value.get_submodule(norm)(self.value.get_submodule(conv)(z))
        gate = gates[self.gate_perm[layer]]
        if gate.shape != pre.shape:
            raise ValueError(
                f"value layer {layer + 1} has shape {tuple(pre.shape[1:])} but its gates (layer "
                f"{self.gate_perm[layer] + 1}) have {tuple(gate.shape[1:])}: permute only layers of equal shape"
            )
        return self.value.get_submodule(act)(pre, gate)

    def _value_pool(self, layer: int, z: torch.Tensor, selections: list) -> torch.Tensor:
        pool = self.value.layer_names()[layer][3]
        if pool is None:
            return z
        if pool in self.max_pools:
            return self.value.get_submodule(pool)(z, selections[layer])
        return self.value.get_submodule(pool)(z)

    def _head(self, z: torch.Tensor, selection: torch.Tensor | None) -> torch.Tensor:
        pooled = self.value.global_pool(z) if selection is None else self.value.global_pool(z, selection)
        return self.value.fc(self.value.flatten(pooled))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gates, selections, selection = self.gating(x)
        z = self._value_input(x)
        for layer in range(len(self.gate_perm)):
            z = self._value_pool(layer, self._value_layer(layer, z, gates), selections)
        return self._head(z, selection)

    # --- sites --------------------------------------------------------------------------------

    def pieces(self) -> list[tuple[str | None, Callable[..., tuple[torch.Tensor, ...]]]]:
        """The value network cut at each of its sites; the state is (z_l, x), and each piece
        computes its model's own gates from x (so a stitched back model gates with its own)."""
        depth = len(self.gate_perm)

        def piece(i):
            def run(z, x):
                gates, selections, _ = self.gating(x)
                return self._value_layer(i, self._value_pool(i - 1, z, selections), gates), x

            return run

        def head(z, x):
            _, selections, selection = self.gating(x)
            return (self._head(self._value_pool(depth - 1, z, selections), selection),)

        first = ("value.act1", lambda x: (self._value_layer(0, self._value_input(x), self.gates(x)), x))
        names = [f"value.{act}" for _, _, act, _ in self.value.layer_names()]
        return [first, *((names[i], piece(i)) for i in range(1, depth)), (None, head)]

    #: Why feature sites have no pieces (read by ``models.forward_to``'s error).
    uncut_sites_reason = (
        "a gated network is cut only at its value sites (value.act<l>): at a feature site the gates "
        "before the cut would come from one model and the value units they gate from the other"
    )

    def site_layout(self) -> list[tuple[str, int, bool]]:
        """Feature sites (F's activations), then value sites, each layer's in forward order."""
        layers = self.value.layer_names()
        widths = [self.value.get_submodule(conv).out_channels for conv, *_ in layers]
        return [(f"features.{act}", w, False) for (_, _, act, _), w in zip(layers, widths)] + [
            (f"value.{act}", w, False) for (_, _, act, _), w in zip(layers, widths)
        ]
