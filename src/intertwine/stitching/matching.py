"""The closed-form starts of ``init: match``: the layer of each class that best maps f's
activations onto g's (least squares, and the G_ReLU and signed monomial matches)."""

from __future__ import annotations

import torch

from intertwine import groups


def channels_by_positions(x: torch.Tensor) -> torch.Tensor:
    """(N, C, ...) activations as a (C, N * positions) float64 matrix."""
    return x.transpose(0, 1).reshape(x.shape[1], -1).double()


def least_squares_map(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The C x C matrix W minimising ||W x - y||^2 over every sample and position (a tiny ridge,
    1e-6 of the mean channel energy, keeps dead channels from making it singular)."""
    X, Y = channels_by_positions(x), channels_by_positions(y)
    gram = X @ X.T
    ridge = 1e-6 * gram.trace() / len(gram) + 1e-12
    return torch.linalg.solve(
        gram + ridge * torch.eye(len(gram), dtype=gram.dtype, device=gram.device), X @ Y.T
    ).T


def match_grelu(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The G_ReLU element that best maps activations ``x`` onto ``y`` (both (N, C, ...)): for each
    output channel i the input channel perm[i] of highest normalised correlation, one to one
    (Hungarian algorithm), then the least-squares nonnegative scale. Exact when y = A x for A in
    G_ReLU and x has no two proportional channels. Returns (perm, scales): y_i ≈ scales[i] x_perm[i].

    Computed in float64; the scales come back in x's floating dtype (the default dtype for integer
    activations). x and y must have one shape with N >= 1 and C >= 1, and finite values.

    Parameters
    ----------
    x : Tensor
        (N, C, ...) activations of f at the site.
    y : Tensor
        (N, C, ...) activations of g at the site, for the same N inputs.

    Returns
    -------
    perm : Tensor
        (C,) long, on ``x``'s device: output channel i reads input channel ``perm[i]``.
    scales : Tensor
        (C,) nonnegative scales, in ``x``'s floating dtype (the default dtype for integer ``x``).
    """
    _check_activations(x, y, "match_grelu")
    xs = x.transpose(0, 1).reshape(x.shape[1], -1).double()
    ys = y.transpose(0, 1).reshape(y.shape[1], -1).double()
    x_norm, y_norm = xs.norm(dim=1).clamp_min(1e-12), ys.norm(dim=1).clamp_min(1e-12)
    correlation = (ys @ xs.T) / (y_norm[:, None] * x_norm[None, :])  # (out, in)
    perm = groups.round_to_permutation(correlation).to(x.device)
    scales = ((ys * xs[perm]).sum(1) / x_norm[perm] ** 2).clamp_min(0)
    return perm, scales.to(x.dtype if x.is_floating_point() else torch.get_default_dtype())


def match_monomial(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """As ``match_grelu`` for a signed monomial layer: channels matched by the absolute normalised
    correlation, then the least-squares scale of either sign. Exact when y = A x for a signed
    monomial A and x has no two proportional channels.

    Parameters
    ----------
    x : Tensor
        (N, C, ...) activations of f at the site.
    y : Tensor
        (N, C, ...) activations of g at the site, for the same N inputs.

    Returns
    -------
    perm : Tensor
        (C,) long, on ``x``'s device: ``y_i ≈ scales[i] x_perm[i]``.
    scales : Tensor
        (C,) scales of either sign, in ``x``'s floating dtype (the default dtype for integer ``x``).
    """
    _check_activations(x, y, "match_monomial")
    xs = x.transpose(0, 1).reshape(x.shape[1], -1).double()
    ys = y.transpose(0, 1).reshape(y.shape[1], -1).double()
    x_norm, y_norm = xs.norm(dim=1).clamp_min(1e-12), ys.norm(dim=1).clamp_min(1e-12)
    correlation = (ys @ xs.T).abs() / (y_norm[:, None] * x_norm[None, :])
    perm = groups.round_to_permutation(correlation).to(x.device)
    scales = (ys * xs[perm]).sum(1) / x_norm[perm] ** 2
    return perm, scales.to(x.dtype if x.is_floating_point() else torch.get_default_dtype())


def _check_activations(x: torch.Tensor, y: torch.Tensor, what: str) -> None:
    """Paired activations f -> g at one site: tensors of one shape (N, C, ...), N >= 1 and
    C >= 1, real and finite."""
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor) or t.ndim < 2 or t.is_complex() or t.dtype == torch.bool:
            raise ValueError(
                f"{what}: {name} must be a real tensor of activations (N, C, ...), got "
                f"{type(t).__name__ if not isinstance(t, torch.Tensor) else (t.dtype, tuple(t.shape))}"
            )
    if x.shape != y.shape:
        raise ValueError(
            f"{what}: x and y must be activations of the same N inputs at one site, of one "
            f"shape (N, C, ...), got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(
            f"{what}: needs at least one sample and one channel, got shape {tuple(x.shape)} "
            "(e.g. stitching.match_images is 0, or the training split is empty)"
        )
    for name, t in (("x", x), ("y", y)):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{what}: {name} contains NaN or infinite values")
