"""Intertwiner groups of elementwise activations (paper section 3, Table 1).

Conventions
-----------
* A permutation ``perm`` (LongTensor of length n) stands for the matrix ``P`` with
  ``P[i, perm[i]] = 1``, so ``(P x)_i = x[perm[i]]``.
* A G_ReLU element is ``A = diag(scales) @ P``, i.e. ``(A x)_i = scales[i] * x[perm[i]]``.
* Every random function takes an explicit CPU ``torch.Generator`` and never touches the
  global RNG; results are float32 unless ``dtype=`` says otherwise.
"""

from __future__ import annotations


import torch
from torch import Tensor

# The Birkhoff polytope and SO(n)'s geodesics live in their own modules; groups keeps their names.
from intertwine.birkhoff import round_to_permutation, sinkhorn
from intertwine.geodesics import rotation_power, rotation_powers

__all__ = [
    "permutation_matrix",
    "grelu_matrix",
    "random_permutation",
    "random_grelu",
    "random_orthogonal",
    "random_rotation",
    "random_permutation_scaling",
    "random_gl",
    "ACTIVATIONS",
    "get_activation",
    "random_group_element",
    "phi",
    "gelu_homogeneity_gap",
    "sinkhorn",
    "round_to_permutation",
    "rotation_power",
    "rotation_powers",
]


# ---------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------


def check_permutation(perm) -> Tensor:
    """``perm`` as a LongTensor, if it is a permutation of 0 .. n-1 (else a ValueError saying why)."""
    perm = torch.as_tensor(perm)
    if (
        perm.dtype == torch.bool
        or perm.is_complex()
        or (perm.is_floating_point() and not torch.equal(perm, perm.round()))
    ):
        raise ValueError(
            f"a permutation holds integers, got {perm.tolist() if perm.numel() <= 16 else perm.dtype}"
        )
    perm = perm.long()
    if perm.ndim != 1:
        raise ValueError(f"a permutation is one-dimensional, got shape {tuple(perm.shape)}")
    n = perm.numel()
    counts = torch.bincount(perm.clamp(0, n), minlength=n + 1)[:n] if n else perm
    if n and (perm.min() < 0 or perm.max() >= n or (counts != 1).any()):
        repeated = [i for i in range(n) if counts[i] > 1]
        raise ValueError(
            f"{perm.tolist() if n <= 16 else 'perm'} is not a permutation of 0..{n - 1}: "
            f"it must hold each index once (repeated {repeated[:8]}, missing "
            f"{[i for i in range(n) if counts[i] == 0][:8]}, out of range "
            f"{[i for i in perm.tolist() if not 0 <= i < n][:8]})"
        )
    return perm


def permutation_matrix(perm, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Return the (n, n) permutation matrix ``P`` with ``P[i, perm[i]] = 1``.

    Parameters
    ----------
    perm : Tensor or sequence of int, shape (n,)
        A permutation of 0 .. n-1 (ValueError otherwise).
    dtype : torch.dtype
        The matrix's dtype.

    Returns
    -------
    Tensor, shape (n, n)
        ``P``, on the device of ``perm``.
    """
    perm = check_permutation(perm)
    n = perm.numel()
    P = torch.zeros(n, n, dtype=dtype, device=perm.device)
    P[torch.arange(n, device=perm.device), perm] = 1
    return P


def monomial_matrix(perm, values) -> Tensor:
    """Return ``diag(values) @ P`` with ``P[i, perm[i]] = 1``: ``A[i, perm[i]] = values[i]``.

    ``A`` has dtype/device of ``values`` (any finite values: signed ones give the groups of odd
    activations).
    """
    values = torch.as_tensor(values)
    if not values.is_floating_point():
        values = values.to(torch.float32)
    perm = check_permutation(perm).to(values.device)
    n = perm.numel()
    if values.shape != (n,):
        raise ValueError(
            f"scales must have one entry per index of perm ({n}), got shape {tuple(values.shape)}"
        )
    if not torch.isfinite(values).all():
        raise ValueError("the scales must be finite")
    rows = torch.arange(n, device=values.device)
    # Scatter instead of diag(values) @ P: no n^3 matmul, no -0.0 entries, and still
    # differentiable with respect to ``values``.
    zeros = torch.zeros(n, n, dtype=values.dtype, device=values.device)
    return zeros.index_put((rows, perm), values)


def grelu_matrix(perm, scales) -> Tensor:
    """Return ``A = diag(scales) @ P`` with ``P[i, perm[i]] = 1`` and ``scales >= 0`` (the group
    G_ReLU has positive scales; a stitching layer's may be 0).

    ``A`` has dtype/device of ``scales``; ``A[i, perm[i]] = scales[i]``.

    Parameters
    ----------
    perm : Tensor or sequence of int, shape (n,)
        A permutation of 0 .. n-1 (ValueError otherwise).
    scales : Tensor or array-like, shape (n,)
        Finite scales >= 0 (ValueError otherwise); integer scales become float32.

    Returns
    -------
    Tensor, shape (n, n)
        ``A``, differentiable with respect to ``scales``.
    """
    if (torch.as_tensor(scales) < 0).any():
        raise ValueError(
            "G_ReLU scales must be nonnegative (the group's are positive); for signed "
            "scales use groups.monomial_matrix"
        )
    return monomial_matrix(perm, scales)


# ---------------------------------------------------------------------------
# Random group elements
# ---------------------------------------------------------------------------


def random_permutation(n: int, generator: torch.Generator) -> Tensor:
    """Uniformly random permutation of ``range(n)`` as a LongTensor.

    Parameters
    ----------
    n : int
        The number of indices.
    generator : torch.Generator
        A CPU generator (the global RNG is not used).

    Returns
    -------
    Tensor, shape (n,)
        The permutation, int64.
    """
    return torch.randperm(n, generator=generator)


def random_grelu(
    n: int,
    generator: torch.Generator,
    sigma: float = 1.0,
    *,
    as_parts: bool = False,
    dtype: torch.dtype = torch.float32,
):
    """Random element of G_ReLU: a random permutation times a positive diagonal.

    The scales are lognormal, ``exp(N(0, sigma^2)) / exp(sigma^2 / 2)``, so that their mean
    is 1 (as in the paper's released code, which uses sigma = 1).

    Returns the (n, n) matrix ``A = diag(scales) @ P``, or ``(perm, scales)`` when
    ``as_parts=True``.

    Parameters
    ----------
    n : int
        The number of channels.
    generator : torch.Generator
        A CPU generator: the permutation is drawn first, then the scales.
    sigma : float
        The standard deviation of the scales' logarithm.
    as_parts : bool
        Return ``(perm, scales)`` instead of the matrix.
    dtype : torch.dtype
        The dtype of the matrix (or of the scales); the scales are sampled in float64 first.

    Returns
    -------
    Tensor, shape (n, n), or tuple of Tensor
        ``A``, or with ``as_parts`` the pair ``perm`` (int64, shape (n,)) and ``scales`` (shape (n,)).
    """
    perm = random_permutation(n, generator)
    # Sample in float64 so that the same seed gives the same scales in every dtype.
    z = torch.randn(n, generator=generator, dtype=torch.float64)
    scales = torch.exp(sigma * z - sigma**2 / 2).to(dtype)
    if as_parts:
        return perm, scales
    return grelu_matrix(perm, scales)


def random_orthogonal(n: int, generator: torch.Generator, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Haar-random matrix in O(n).

    QR of a standard normal matrix; multiplying the columns of Q by sign(diag(R)) makes
    the factorisation unique and hence the law of Q exactly Haar (Mezzadri 2007).

    Parameters
    ----------
    n : int
        The dimension.
    generator : torch.Generator
        A CPU generator.
    dtype : torch.dtype
        The result's dtype (sampled in float64, then converted).

    Returns
    -------
    Tensor, shape (n, n)
        An orthogonal matrix.
    """
    G = torch.randn(n, n, generator=generator, dtype=torch.float64)
    Q, R = torch.linalg.qr(G)
    signs = torch.sign(torch.diagonal(R))
    signs[signs == 0] = 1  # probability zero, but keep Q orthogonal regardless
    return (Q * signs).to(dtype)


def random_rotation(n: int, generator: torch.Generator, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Haar-random matrix in SO(n) (a Haar O(n) sample with one column flipped if det < 0).

    Flipping a column is a bijection between the two cosets of SO(n) that preserves Haar
    measure, so the result is Haar on SO(n).

    Parameters
    ----------
    n : int
        The dimension.
    generator : torch.Generator
        A CPU generator.
    dtype : torch.dtype
        The result's dtype (sampled in float64, then converted).

    Returns
    -------
    Tensor, shape (n, n)
        An orthogonal matrix of determinant +1.
    """
    Q = random_orthogonal(n, generator, dtype=torch.float64)
    if torch.linalg.det(Q) < 0:
        Q[:, 0] = -Q[:, 0]
    return Q.to(dtype)


def random_permutation_scaling(
    n: int,
    generator: torch.Generator,
    *,
    signs: bool = False,
    positive: bool = False,
    sigma: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Random ``diag(d) @ P`` for the monomial groups of Table 1.

    * ``signs=True``: d uniform in {-1, +1} (group of the Gaussian RBF).
    * ``positive=True``: d lognormal as in :func:`random_grelu` (G_ReLU).
    * otherwise: d = random sign times lognormal, i.e. any nonzero real (group of x^d).

    Parameters
    ----------
    n : int
        The dimension.
    generator : torch.Generator
        A CPU generator.
    signs : bool
        Draw d uniform in {-1, +1}.
    positive : bool
        Draw d lognormal (mean 1); not together with ``signs`` (ValueError).
    sigma : float
        The standard deviation of the lognormal magnitudes' logarithm.
    dtype : torch.dtype
        The result's dtype (sampled in float64, then converted).

    Returns
    -------
    Tensor, shape (n, n)
        ``diag(d) @ P`` with ``P`` a uniformly random permutation matrix.
    """
    if signs and positive:
        raise ValueError("signs=True and positive=True are mutually exclusive")
    perm = random_permutation(n, generator)
    sign = torch.randint(0, 2, (n,), generator=generator, dtype=torch.float64) * 2 - 1
    if signs:
        d = sign
    else:
        z = torch.randn(n, generator=generator, dtype=torch.float64)
        d = torch.exp(sigma * z - sigma**2 / 2)
        if not positive:
            d = sign * d
    return monomial_matrix(perm, d.to(dtype))


def random_gl(n: int, generator: torch.Generator, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Random element of GL_n: a standard normal matrix (invertible with probability 1).

    Parameters
    ----------
    n : int
        The dimension.
    generator : torch.Generator
        A CPU generator.
    dtype : torch.dtype
        The result's dtype (sampled in float64, then converted).

    Returns
    -------
    Tensor, shape (n, n)
        The matrix.
    """
    return torch.randn(n, n, generator=generator, dtype=torch.float64).to(dtype)


# ---------------------------------------------------------------------------
# Table 1: activations, their intertwiner groups and phi
# ---------------------------------------------------------------------------


def _identity(x: Tensor) -> Tensor:
    return x


def _leaky_relu(x: Tensor, slope: float = 0.01) -> Tensor:
    return torch.nn.functional.leaky_relu(x, negative_slope=slope)


def _rbf(x: Tensor) -> Tensor:
    """Gaussian RBF ``exp(-x^2 / 2)``."""
    return torch.exp(-0.5 * x * x)


def _polynomial(x: Tensor, d: int = 3) -> Tensor:
    return x**d


#: Elementwise activations of Table 1, name -> callable. ``leaky_relu`` takes ``slope``
#: (default 0.01) and ``polynomial`` takes the degree ``d`` (default 3) as keywords.
ACTIVATIONS = {
    "identity": _identity,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "leaky_relu": _leaky_relu,
    "rbf": _rbf,
    "polynomial": _polynomial,
}

# Keywords of each activation; every Table 1 function accepts (and ignores) the keywords
# of the other activations, so callers can pass one uniform set of options.
_ACTIVATION_KWARGS = {"leaky_relu": ("slope",), "polynomial": ("d",)}
_KNOWN_KWARGS = {"slope", "d"}

_GELU_MESSAGE = (
    "GELU has no nontrivial scaling symmetry: it is not positively homogeneous "
    "(GELU(lambda x) != lambda GELU(x) for lambda > 0, lambda != 1; see "
    "gelu_homogeneity_gap), so it is not in Table 1 and phi is not defined for it."
)


def _check_activation(activation: str, kw: dict, extra: tuple = ()) -> dict:
    """Validate an activation name and keywords; return the defaults-filled keywords."""
    if activation == "gelu":
        raise ValueError(_GELU_MESSAGE)
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; known: {', '.join(sorted(ACTIVATIONS))}")
    unknown = set(kw) - _KNOWN_KWARGS - set(extra)
    if unknown:
        raise TypeError(f"unexpected keyword(s) for {activation!r}: {sorted(unknown)}")
    params = {"slope": 0.01, "d": 3}
    params.update(kw)
    if activation == "polynomial" and (int(params["d"]) != params["d"] or params["d"] < 1):
        raise ValueError(f"polynomial degree d must be a positive integer, got {params['d']}")
    return params


def get_activation(activation: str, **kw):
    """Return the elementwise activation as a one-argument callable, keywords bound.

    Parameters
    ----------
    activation : str
        A name of ``ACTIVATIONS`` ("identity", "sigmoid", "relu", "leaky_relu", "rbf", "polynomial");
        "gelu" and unknown names are a ValueError.
    **kw
        ``slope`` (leaky_relu's negative slope, default 0.01) and ``d`` (the polynomial's degree, a
        positive integer, default 3); each activation ignores the other's keyword, and any other
        keyword is a TypeError.

    Returns
    -------
    callable
        ``Tensor -> Tensor``, elementwise.
    """
    _check_activation(activation, kw)
    fn = ACTIVATIONS[activation]
    own = {k: kw[k] for k in _ACTIVATION_KWARGS.get(activation, ()) if k in kw}
    return (lambda x: fn(x, **own)) if own else fn


def random_group_element(
    activation: str,
    n: int,
    generator: torch.Generator,
    *,
    dtype: torch.dtype = torch.float32,
    **kw,
) -> Tensor:
    """Random (n, n) element of the intertwiner group G_sigma of Table 1.

    identity: GL_n (standard normal matrix); sigmoid: permutations; relu / leaky_relu:
    P·D with D positive (lognormal, keyword ``sigma``); rbf: P·D with D = ±1;
    polynomial: P·D with D nonzero (random sign times lognormal).

    Parameters
    ----------
    activation : str
        A name of ``ACTIVATIONS``; "gelu" and unknown names are a ValueError.
    n : int
        The dimension.
    generator : torch.Generator
        A CPU generator.
    dtype : torch.dtype
        The result's dtype.
    **kw
        ``sigma`` (the lognormal scales' log standard deviation, default 1.0), and the activation's
        ``slope`` or ``d`` as in :func:`get_activation`: leaky_relu with slope 1 and the polynomial of
        degree 1 are the identity, whose group is GL_n.

    Returns
    -------
    Tensor, shape (n, n)
        The group element.
    """
    params = _check_activation(activation, kw, extra=("sigma",))
    sigma = params.get("sigma", 1.0)
    # Degenerate cases that are really the identity activation, whose group is GL_n.
    linear = (activation == "leaky_relu" and params["slope"] == 1) or (
        activation == "polynomial" and params["d"] == 1
    )
    if activation == "identity" or linear:
        return random_gl(n, generator, dtype=dtype)
    if activation == "sigmoid":
        return permutation_matrix(random_permutation(n, generator), dtype=dtype)
    if activation in ("relu", "leaky_relu"):
        return random_grelu(n, generator, sigma, dtype=dtype)
    if activation == "rbf":
        return random_permutation_scaling(n, generator, signs=True, dtype=dtype)
    return random_permutation_scaling(n, generator, sigma=sigma, dtype=dtype)  # polynomial


def phi(activation: str, A, **kw) -> Tensor:
    """Table 1's phi: the matrix with ``sigma(A x) = phi(A) sigma(x)`` for A in G_sigma.

    identity / sigmoid / relu / leaky_relu: A; rbf: abs(A); polynomial x^d: A ** d
    elementwise. Raises ValueError for unknown activations and for "gelu".

    Parameters
    ----------
    activation : str
        A name of ``ACTIVATIONS``.
    A : Tensor or array-like, shape (n, n)
        An element of the activation's group G_sigma (not checked).
    **kw
        The activation's ``slope`` or ``d``, as in :func:`get_activation`.

    Returns
    -------
    Tensor, shape (n, n)
        ``phi(A)`` (``A`` itself, as a tensor, where phi is the identity).
    """
    params = _check_activation(activation, kw)
    A = torch.as_tensor(A)
    if activation == "rbf":
        return A.abs()
    if activation == "polynomial":
        return A ** int(params["d"])
    return A


def gelu_homogeneity_gap(
    lambdas, n_samples: int = 100_000, generator: torch.Generator | None = None
) -> Tensor:
    """Monte-Carlo ``E |GELU(lambda x) - lambda GELU(x)|`` with x ~ N(0, 1) (paper Fig. 17b).

    One float64 value per entry of ``lambdas`` (same shape). The same x samples are used for
    every lambda, so the gap is exactly 0 at lambda = 1. Without a generator a fixed seed
    (0) is used rather than the global RNG.

    Parameters
    ----------
    lambdas : float, array-like or Tensor
        The scalings lambda, any shape.
    n_samples : int
        The number of samples x.
    generator : torch.Generator, optional
        The CPU generator of the samples; None: one seeded with 0.

    Returns
    -------
    Tensor
        The gap per lambda, float64, of the shape of ``lambdas``.
    """
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    lam = torch.as_tensor(lambdas, dtype=torch.float64)
    x = torch.randn(n_samples, generator=generator, dtype=torch.float64)
    gelu = torch.nn.functional.gelu
    flat = lam.reshape(-1, 1)
    gap = (gelu(flat * x) - flat * gelu(x)).abs().mean(dim=1)
    return gap.reshape(lam.shape)
