"""The rotation penalty (paper section 3.3, Fig. 4): how much accuracy a network loses when the
pre-activation of one layer is transformed by a group element and only the later layers may adapt.

For a trained model and a site l: insert a fixed 1x1 convolution A right before the activation
at l (so the pre-activation z becomes A z), freeze every layer up to and including l (they run
in eval mode without autograd, so fine-tuning costs only the later layers), fine-tune the rest,
and compare test accuracies. An element of the activation's intertwiner group
(G_ReLU for ReLU) can be undone exactly by the next layer, so its penalty should be near zero; a
random orthogonal A cannot, and costs accuracy.
"""

from __future__ import annotations

import copy
import numbers
import time
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from intertwine import groups, models
from intertwine.data import Split
from intertwine.training import evaluate, train

if TYPE_CHECKING:
    from intertwine.training_config import TrainConfig


class ChannelTransform(nn.Module):
    """A fixed (non-trainable) linear map on the channel dimension: a 1x1 conv without bias."""

    def __init__(self, matrix: torch.Tensor):
        super().__init__()
        self.register_buffer("matrix", matrix.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("ij,nj...->ni...", self.matrix.to(x.dtype), x)


def transform_site(model: nn.Module, site: str, matrix: torch.Tensor) -> nn.Module:
    """A copy of ``model`` whose pre-activation at ``site`` is multiplied by ``matrix``.

    The activation module at ``site`` is replaced by ``Sequential(ChannelTransform, activation)``,
    so the transformed model keeps every parameter name (prefixed ``.1`` only at the site).

    Parameters
    ----------
    model : nn.Module
        A model built by ``intertwine.models.build`` (not changed).
    site : str
        One of its sites.
    matrix : Tensor
        The finite (C, C) transform, C the site's channel count.

    Returns
    -------
    nn.Module
        The transformed copy; ``matrix`` is a buffer on the model's device.
    """
    channels = {s.name: s.channels for s in models.sites(model)}
    if site not in channels:
        raise ValueError(f"{type(model).__name__} has no site {site!r}; its sites are {list(channels)}")
    if tuple(matrix.shape) != (channels[site], channels[site]):
        raise ValueError(
            f"site {site!r} has {channels[site]} channels, so its transform must be a "
            f"{channels[site]}x{channels[site]} matrix, got {tuple(matrix.shape)}"
        )
    if matrix.is_floating_point() and not bool(torch.isfinite(matrix).all()):
        raise ValueError(f"the transform at site {site!r} contains NaN or infinite values")
    model = copy.deepcopy(model)
    parent_name, _, child = site.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    activation = getattr(parent, child)
    device = next(model.parameters()).device
    setattr(parent, child, nn.Sequential(ChannelTransform(matrix.to(device)), activation))
    return model


def rotation_trial(
    model: nn.Module,
    site: str,
    matrix: torch.Tensor,
    train_split: Split,
    val_split: Split,
    test_split: Split,
    config: TrainConfig,
    generator: torch.Generator,
    mean: torch.Tensor,
    std: torch.Tensor,
    label: str = "rotation",
    log: Callable[[str], None] = print,
    acc_before: float | None = None,
) -> dict:
    """Accuracy before the transform (``acc_before`` when known), right after it, and after
    fine-tuning the later layers.

    Parameters
    ----------
    model : nn.Module
        The trained model (not changed).
    site : str
        The site whose pre-activation is transformed (one of ``models.cut_sites``).
    matrix : Tensor
        The (C, C) transform (e.g. ``sample_transform``).
    train_split, val_split, test_split : Split
        Fine-tuning's training and validation images, and the images accuracy is measured on.
    config : TrainConfig
        The fine-tuning recipe (``training.train``'s).
    generator : torch.Generator
        The source of fine-tuning's random draws.
    mean, std : Tensor
        The per-channel input normalisation (0..1 units).
    label : str, default "rotation"
        What the log's lines start with.
    log : Callable[[str], None], default print
        Where fine-tuning's log goes.
    acc_before : float or None, default None
        The model's test accuracy when already measured (None: it is measured here).

    Returns
    -------
    dict
        ``acc_before``, ``acc_transformed`` (right after the transform), ``acc_finetuned`` and
        ``finetune_seconds`` (the whole trial's time, measurements included).
    """
    started = time.perf_counter()
    acc = lambda m: evaluate(m, test_split, mean, std, config.eval_batch_size)  # noqa: E731
    acc_before = acc(model) if acc_before is None else acc_before
    transformed = transform_site(model, site, matrix)
    acc_transformed = acc(transformed)
    # The transformed layers up to the site stay frozen (run without autograd, in eval mode); a
    # copy of the original model's later layers fine-tunes on top of them.
    finetuned = models.Stitched(front=transformed, back=copy.deepcopy(model), site=site)
    result = train(finetuned, train_split, val_split, config, generator, mean, std, label=label, log=log)
    finetuned.load_state_dict(result.state_dict)
    return {
        "acc_before": acc_before,
        "acc_transformed": acc_transformed,
        "acc_finetuned": acc(finetuned),
        "finetune_seconds": time.perf_counter() - started,
    }


GROUPS = ("identity", "grelu", "orthogonal", "permutation")


def sample_transform(group: str, n: int, generator: torch.Generator, sigma: float = 1.0) -> torch.Tensor:
    """A random (n, n) element of ``group``: G_ReLU (permutation times lognormal scales),
    Haar-orthogonal, a permutation alone (the intertwiner group of the sigmoid), or the identity
    (the control: what fine-tuning alone gains or loses).

    Parameters
    ----------
    group : str
        "identity", "grelu", "orthogonal" or "permutation" (``GROUPS``).
    n : int
        The number of channels, at least 1.
    generator : torch.Generator
        The source of the draw (none for the identity).
    sigma : float, default 1.0
        The lognormal scales' sigma ("grelu").

    Returns
    -------
    Tensor
        The (n, n) matrix, float32 (the identity: torch's default dtype).
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"a transform of the channels needs n >= 1 channels, got {n!r}")
    if group == "identity":
        return torch.eye(n)
    if group == "grelu":
        return groups.random_grelu(n, generator, sigma)
    if group == "orthogonal":
        return groups.random_orthogonal(n, generator)
    if group == "permutation":
        return groups.permutation_matrix(groups.random_permutation(n, generator))
    raise ValueError(f"rotation group {group!r} is not one of {GROUPS}")
