"""Group elements at a site: ``(perm, scales)`` tuples or ``(n, n)`` matrices, validated and
brought to one canonical form, and their action on a representation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

# Activations with sigma(d x) = d sigma(x) for d > 0, hence G_ReLU-equivariant with phi(A) = A.
POSITIVELY_HOMOGENEOUS = (nn.ReLU, nn.LeakyReLU, nn.Identity)


@dataclass(frozen=True)
class Element:
    """An element in canonical form: always the dense float64 matrix, plus the parts if G_ReLU."""

    matrix: Tensor  # (n, n) float64, CPU
    perm: Tensor | None = None  # long (n,) when a positive monomial matrix
    scales: Tensor | None = None  # float64 (n,)

    @property
    def monomial(self) -> bool:
        return self.perm is not None

    @property
    def is_identity(self) -> bool:
        n = self.matrix.shape[0]
        return self.monomial and bool((self.perm == torch.arange(n)).all()) and bool((self.scales == 1).all())


def element_from_parts(perm: Tensor, scales: Tensor) -> Element:
    n = perm.numel()
    matrix = torch.zeros(n, n, dtype=torch.float64)
    matrix[torch.arange(n), perm] = scales
    return Element(matrix, perm, scales)


def parse_element(element: Any, n: int, where: str, signed: bool = False) -> Element:
    """Validate `element` for a site of width n and bring it to canonical form; ``signed`` admits
    monomials with negative scales (a gated network's value sites)."""
    if isinstance(element, tuple):
        if len(element) != 2:
            raise ValueError(
                f"{where}: a G_ReLU element is a tuple (perm, scales), got a tuple of length {len(element)}"
            )
        perm = torch.as_tensor(element[0]).detach().cpu()
        scales = torch.as_tensor(element[1]).detach().cpu()
        if perm.is_floating_point() or perm.is_complex() or perm.dtype == torch.bool:
            raise ValueError(f"{where}: perm must hold integers, got dtype {perm.dtype}")
        perm = perm.long()
        if perm.shape != (n,) or scales.shape != (n,):
            raise ValueError(
                f"{where}: the site has {n} channels, but perm has shape "
                f"{tuple(perm.shape)} and scales {tuple(scales.shape)}"
            )
        if not torch.equal(torch.sort(perm).values, torch.arange(n)):
            raise ValueError(f"{where}: perm is not a permutation of range({n})")
        scales = scales.to(torch.float64)
        if signed and not (torch.isfinite(scales).all() and (scales != 0).all()):
            raise ValueError(f"{where}: monomial scales must be finite and nonzero")
        if not signed and not (torch.isfinite(scales).all() and (scales > 0).all()):
            raise ValueError(
                f"{where}: G_ReLU scales must be finite and positive (pass a matrix for other elements; "
                "negative scales are symmetries only of a gated network's value units)"
            )
        return element_from_parts(perm, scales)

    matrix = torch.as_tensor(element).detach().cpu()
    if matrix.is_complex():
        raise ValueError(f"{where}: complex matrices are not supported")
    matrix = matrix.to(torch.float64)
    if matrix.shape != (n, n):
        raise ValueError(
            f"{where}: the site has {n} channels, expected a ({n}, {n}) matrix or a "
            f"tuple (perm, scales), got shape {tuple(matrix.shape)}"
        )
    if not torch.isfinite(matrix).all():
        raise ValueError(f"{where}: the matrix has non-finite entries")
    svals = torch.linalg.svdvals(matrix)
    if n and not svals[-1] > 1e-12 * svals[0]:
        raise ValueError(f"{where}: the matrix is singular (not a group element)")
    nonzero = matrix != 0
    if (nonzero.sum(1) == 1).all() and (nonzero.sum(0) == 1).all() and (signed or (matrix >= 0).all()):
        perm = nonzero.to(torch.int8).argmax(1)
        return Element(matrix, perm, matrix[torch.arange(n), perm])
    return Element(matrix)


def element_matrix(element: Any, n: int | None = None) -> Tensor:
    """The dense (n, n) float64 matrix of an element: ``(perm, scales)`` or a matrix.

    Parameters
    ----------
    element : tuple or Tensor
        ``(perm, scales)`` (``A[i, perm[i]] = scales[i]``, scales finite and nonzero, of either
        sign) or an invertible (n, n) matrix (anything ``torch.as_tensor`` takes).
    n : int or None, default None
        The dimension (None: read from the element).

    Returns
    -------
    Tensor
        (n, n) float64 matrix on the CPU, a new tensor.
    """
    if n is None:
        n = torch.as_tensor(element[0]).numel() if isinstance(element, tuple) else len(element)
    return parse_element(element, n, "element", signed=True).matrix.clone()


def act_on_representation(x: Tensor, element: Any, dim: int = 1) -> Tensor:
    """``A`` applied to the channel dimension `dim` of `x` (for ReLU-like sites, phi(A) = A).

    Parameters
    ----------
    x : Tensor
        The representation, its channels on dimension ``dim``.
    element : tuple or Tensor
        ``(perm, scales)`` or an invertible (C, C) matrix, C = ``x.shape[dim]``.
    dim : int, default 1
        The channel dimension.

    Returns
    -------
    Tensor
        ``A x`` on that dimension, of ``x``'s shape, on ``x``'s device and in its dtype.
    """
    el = parse_element(element, x.shape[dim], "element", signed=True)
    if el.monomial:
        perm = el.perm.to(x.device)
        shape = [1] * x.dim()
        shape[dim] = -1
        return x.index_select(dim, perm) * el.scales.to(x.device, x.dtype).view(shape)
    out = torch.tensordot(el.matrix.to(x.device, x.dtype), x, dims=([1], [dim]))
    return torch.movedim(out, 0, dim)
