"""The convolutional DEQ-NTK (``conv_deq_ntk``) against networks of finite width: Monte Carlo.

The reference is a weight-tied, zero-padded 3x3 convolutional DEQ with C channels, sampled and
differentiated by autograd, written from the network's definition alone (none of the library's
kernel code): its equilibrium f* = F(f*) with

    F(f)_p = [sqrt(sigma_w2 / C) (W * relu~(f))_p + sqrt(sigma_u2) (U * x)_p] / sqrt(n_p) + sqrt(sigma_b2) b

(relu~(z) = sqrt(2) max(0, z), the paper's normalised ReLU; W, U, b standard normal; n_p the
in-bounds taps of the window at p: Feng & Kolter's [S]_p^2, the "number of non-zero entries" of
the window, here divided out at the window's centre p). Theta(p, p') is the NTK of f*_p with
respect to (W, U, b), averaged over channels; the "trace" readout's network adds, per position,
trained readout weights on relu~(f*_p), on the pixel x_p and a bias, and sums over positions.
The mean of the empirical kernels over independent networks must lie within a few standard errors
of the kernel in every entry, and the same test must reject the kernel with the normaliser of
the convolutional NTK (1/q^2 = 1/9 at every position, the one Feng & Kolter's appendix B says
does not normalise the positions near the border).
"""

import math

import pytest
import torch
import torch.nn.functional as F

from intertwine.kernels import deq, deq_conv

F64 = torch.float64
SETTING = {"sigma_w2": 0.5, "sigma_u2": 0.3, "sigma_b2": 0.2}  # a bias too: all three terms checked
CHANNELS, DRAWS = 128, 96
#: The sampled networks run in float32 (CPU float64 convolutions are ten times slower): the
#: iterations stop at a relative step of STEP, far below the Monte Carlo's standard errors.
NET, STEP = torch.float32, 1e-6


def _images(seed: int) -> torch.Tensor:
    """Three 3-channel 4x4 images with unit pixels, correlated (a shared part) so that the kernel's
    entries between images are not near 0."""
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(1, 3, 4, 4, generator=g, dtype=F64)
    X = shared + 0.8 * torch.randn(3, 3, 4, 4, generator=g, dtype=F64)
    return X / X.norm(dim=1, keepdim=True)


def _taps(height: int, width: int) -> torch.Tensor:
    """n_p: the 3x3 window's in-bounds taps at each position (a convolution of ones, zero-padded)."""
    ones = torch.ones(1, 1, height, width, dtype=F64)
    return F.conv2d(ones, torch.ones(1, 1, 3, 3, dtype=F64), padding=1)[0, 0]


def _tap_sum(Z: torch.Tensor) -> torch.Tensor:
    """sum over the 3x3 taps t of Z[..., p + t, p' + t] for Z (..., H, W, H, W), zero outside."""
    H, W = Z.shape[-4], Z.shape[-3]
    padded = F.pad(Z, (1, 1, 1, 1, 1, 1, 1, 1))
    return sum(padded[..., a : a + H, c : c + W, a : a + H, c : c + W] for a in range(3) for c in range(3))


def _network(X: torch.Tensor, generator: torch.Generator):
    """One sampled network on X: its equilibrium f* (n, C, H, W), the step's adjoint in f at f*
    (lambda -> J^T lambda) and the normaliser 1 / sqrt(n_p)."""
    _, c0, H, W = X.shape
    w, u, b = SETTING["sigma_w2"], SETTING["sigma_u2"], SETTING["sigma_b2"]
    Wc = torch.randn(CHANNELS, CHANNELS, 3, 3, generator=generator, dtype=F64).to(NET)
    Uc = torch.randn(CHANNELS, c0, 3, 3, generator=generator, dtype=F64).to(NET)
    bias = torch.randn(CHANNELS, generator=generator, dtype=F64).to(NET)
    scale = (1 / _taps(H, W).sqrt()).to(NET)
    injected = math.sqrt(u) * F.conv2d(X.to(NET), Uc, padding=1) * scale + math.sqrt(b) * bias[:, None, None]
    f = _iterate(
        lambda f: math.sqrt(w / CHANNELS) * F.conv2d(relu(f), Wc, padding=1) * scale + injected, injected
    )
    slope = math.sqrt(2) * (f > 0).to(NET)

    def adjoint(lam):
        # J = dF/df = sqrt(w / C) diag(scale) conv_W diag(relu~'(f)); conv_transpose2d is the
        # adjoint of conv2d at padding 1.
        back = F.conv_transpose2d((lam * scale).flatten(0, 1), Wc, padding=1).view(lam.shape)
        return math.sqrt(w / CHANNELS) * slope[:, None] * back

    return f, adjoint, scale


def _iterate(step, start):
    """start -> step(current) to a relative step of STEP (the maps contract at about sqrt(w))."""
    current = start
    for _ in range(500):
        current, last = step(current), current
        if (current - last).abs().max() <= STEP * current.abs().max():
            return current
    raise AssertionError("the sampled network's iteration did not converge")


def relu(z):
    return math.sqrt(2) * torch.relu(z)


def _empirical(X: torch.Tensor, generator: torch.Generator):
    """One sampled network's Theta (n, n, H, W, H, W), the NTK of f*_p . probe / sqrt(C) (probe a
    fixed standard normal readout), and its trace readout's NTK (n, n), by the chain rule:
    d out / d theta = lambda^T dF/dtheta with lambda = (I - J)^-T d out / df*."""
    n, _, H, W = X.shape
    P = H * W
    w, u, b = SETTING["sigma_w2"], SETTING["sigma_u2"], SETTING["sigma_b2"]
    f, adjoint, scale = _network(X, generator)
    probe = torch.randn(CHANNELS, generator=generator, dtype=F64).to(NET)
    V = torch.randn(CHANNELS, H, W, generator=generator, dtype=F64).to(NET)  # the trace readout's
    # d out / df*: per image, P position outputs (probe at one position) and the trace readout's
    positions = torch.einsum("c,pq->pcq", probe, torch.eye(P, dtype=NET)).reshape(P, CHANNELS, H, W)
    positions = positions.expand(n, -1, -1, -1, -1) / math.sqrt(CHANNELS)
    trace = math.sqrt(w / CHANNELS) * V * math.sqrt(2) * (f > 0).to(NET)
    seed = torch.cat([positions, trace[:, None]], dim=1)  # (n, P + 1, C, H, W)
    lam = _iterate(lambda lam: seed + adjoint(lam), seed).to(F64)
    f, scale = f.to(F64), scale.to(F64)
    g = (lam * scale).flatten(3)  # the weights' and injection's upstream gradient
    G = torch.einsum("iacp,jbcq->iajbpq", g, g).reshape(n, P + 1, n, P + 1, H, W, H, W)
    pixels = torch.einsum("icp,jcq->ijpq", X.flatten(2), X.flatten(2)).reshape(n, n, H, W, H, W)
    hidden = relu(f).flatten(2)
    activity = torch.einsum("icp,jcq->ijpq", hidden, hidden).reshape(n, n, H, W, H, W) / CHANNELS
    windows = w * _tap_sum(activity) + u * _tap_sum(pixels)  # (n, n, H, W, H, W)
    sums = lam.sum(dim=(3, 4))  # the bias's gradient
    ntk = torch.einsum("iajbpqrs,ijpqrs->iajb", G, windows) + b * torch.einsum("iac,jbc->iajb", sums, sums)
    theta = ntk[:, :P, :, :P].reshape(n, H, W, n, H, W).permute(0, 3, 1, 2, 4, 5)
    # the trace readout's own weights: on relu~(f*_p), on x_p and its bias, per position
    diagonal = torch.diagonal(activity.reshape(n, n, P, P), dim1=2, dim2=3).sum(2)
    own = w * diagonal + u * torch.diagonal(pixels.reshape(n, n, P, P), dim1=2, dim2=3).sum(2) + b * P
    return theta, ntk[:, P, :, P] + own


@pytest.fixture(scope="module")
def monte_carlo():
    """The mean and standard error over DRAWS networks of Theta and of the trace readout's NTK
    (about 35 s on one loaded core)."""
    X = _images(seed=31)
    generator = torch.Generator().manual_seed(32)
    draws = [_empirical(X, generator) for _ in range(DRAWS)]
    summary = []
    for k in range(2):
        values = torch.stack([d[k] for d in draws])
        summary.append((values.mean(0), values.std(0) / math.sqrt(DRAWS)))
    return X, summary


def _z(mean, se, kernel):
    return (mean - kernel) / se.clamp(min=1e-12)


def test_conv_deq_ntk_is_the_mean_ntk_of_finite_width_networks(monte_carlo):
    X, ((theta_mean, theta_se), (trace_mean, trace_se)) = monte_carlo
    theta = deq.conv_deq_ntk(X, **SETTING, pooling="none", tol=1e-13).gram
    trace = deq.conv_deq_ntk(X, **SETTING, pooling="trace", tol=1e-13).gram
    for mean, se, kernel in ((theta_mean, theta_se, theta), (trace_mean, trace_se, trace)):
        z = _z(mean, se, kernel)
        # 2,304 (and 9) entries, each a t statistic on 95 degrees of freedom: every one within 5
        # standard errors (P(|t| > 5) is 3e-6 an entry), their mean square near 1 (E t^2 = 1.02).
        # Measured: max |z| 2.8 and mean z^2 0.95 for Theta, 1.2 and 1.03 for the trace.
        assert z.abs().max() < 5, float(z.abs().max())
        assert float((z**2).mean()) < 1.5
    # the Monte Carlo is sharp enough to matter: the standard errors are a few per cent (measured:
    # a median of 3.4 % of Theta's entries, 1.8 % of the trace readout's)
    assert float((theta_se / theta.abs()).median()) < 0.05


def test_the_same_check_rejects_the_cntks_normaliser(monte_carlo, monkeypatch):
    # 1/q^2 at every position (9 taps counted where the window holds fewer): what Feng & Kolter's
    # appendix B says the CNTK uses and does not normalise near the border.
    X, ((theta_mean, theta_se), _) = monte_carlo
    monkeypatch.setattr(deq_conv, "_tap_counts", lambda h, w: torch.full((h, w), 9.0, dtype=F64))
    wrong = deq.conv_deq_ntk(X, **SETTING, pooling="none", tol=1e-13).gram
    assert float((_z(theta_mean, theta_se, wrong) ** 2).mean()) > 10  # measured: 89
