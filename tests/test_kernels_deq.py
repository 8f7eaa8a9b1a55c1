"""The infinite-width NTK/NNGP of deep and equilibrium ReLU networks (intertwine.kernels.deq).

References are independent of the library where possible: scalar recursions with ``math.acos``,
a weight-tied network sampled at finite width (and differentiated by autograd), and the
convolutional kernel's linear operator built entry by entry.
"""

import math

import numpy as np
import pytest
import torch

from intertwine.kernels import deq

SETTINGS = [(0.25, 0.25, 0.5), (0.6, 0.4, 0.0), (0.8, 0.2, 0.0)]
F64 = torch.float64


def _variances(setting):
    return dict(zip(("sigma_w2", "sigma_u2", "sigma_b2"), setting))


def _unit_rows(n, d, seed=0):
    X = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=F64)
    return X / X.norm(dim=1, keepdim=True)


def _cifar_like(n, d, seed=0):
    """Unit rows with correlations between about 0.7 and 0.95, like normalised raw images."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=F64) + 0.5 * torch.rand(n, 1, generator=g, dtype=F64)
    return X / X.norm(dim=1, keepdim=True)


def _k1(r):
    r = min(1.0, max(-1.0, r))
    return (math.sqrt(1 - r * r) + (math.pi - math.acos(r)) * r) / math.pi


def _k0(r):
    return (math.pi - math.acos(min(1.0, max(-1.0, r)))) / math.pi


def _reference_depth(c, setting, depth):
    """(Sigma^(L), Theta^(L)) of one pair with x.y = c, straight from the recursion."""
    w, u, b = setting
    sigma, theta = c, c
    for _ in range(depth):
        sigma, theta = w * _k1(sigma) + u * c + b, w * _k0(sigma) * theta + (w * _k1(sigma) + u * c + b)
    return sigma, theta


# ---------------------------------------------------------------------------
# 1. closed form against the iteration
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("setting", SETTINGS)
def test_closed_form_equals_200_step_iteration(setting):
    inner = torch.tensor([-0.9, -0.3, 0.0, 0.5, 0.9, 0.99], dtype=F64)
    closed = deq.deq_ntk_from_inner(inner, **_variances(setting), tol=1e-13).gram
    reference = torch.tensor([_reference_depth(float(c), setting, 200)[1] for c in inner], dtype=F64)
    torch.testing.assert_close(closed, reference, rtol=0, atol=1e-9)
    # At the default tol = 1e-10, rho* is off by up to 4e-10, and the closed form's slope (up to 40
    # near rho = 1, from kappa0's) makes that 1e-8 at (0.8, 0.2, 0) and x.y = 0.99.
    default = deq.deq_ntk_from_inner(inner, **_variances(setting)).gram
    torch.testing.assert_close(default, reference, rtol=0, atol=3e-8)


def _mpmath_theta(delta_x, setting) -> float:
    """Theta* at 50 digits for 1 - x.y = delta_x (given exactly): delta* the root of
    sigma_w2 (1 - kappa1(1 - delta)) + sigma_u2 delta_x - delta in [0, sigma_u2 delta_x / (1 - sigma_w2)]
    (bisection, 200 halvings), then rho* / (1 - sigma_w2 kappa0(rho*))."""
    import mpmath  # a dev dependency (pyproject.toml)

    with mpmath.workdps(50):
        w, u = (mpmath.mpf(v) for v in setting[:2])
        delta_x = mpmath.mpf(delta_x)

        def one_minus_kappa1(d):
            rho = 1 - d
            return 1 - (mpmath.sqrt(max(0, 1 - rho**2)) + (mpmath.pi - mpmath.acos(rho)) * rho) / mpmath.pi

        low, high = mpmath.mpf(0), u * delta_x / (1 - w)  # h(low) >= 0 >= h(high)
        for _ in range(200):
            middle = (low + high) / 2
            if w * one_minus_kappa1(middle) + u * delta_x - middle > 0:
                low = middle
            else:
                high = middle
        delta = (low + high) / 2
        return float((1 - delta) / (1 - w * (mpmath.pi - mpmath.acos(1 - delta)) / mpmath.pi))


@pytest.mark.parametrize("setting", [*SETTINGS, (0.8, 0.0, 0.2), (0.9, 0.05, 0.05), (0.99, 0.01, 0.0)])
def test_fixed_point_is_exact_against_mpmath_where_one_minus_rho_is_small(setting):
    """Where 1 - rho* is small Theta* depends on sqrt(1 - rho*): a fixed-point iteration stopped at a
    step of tol left Theta* off by about sqrt(tol) (3.4e-5 relative at (0.8, 0, 0.2), whose rho* is
    1 for every pair; 2e-4 at (0.99, 0.01, 0)). Against a 50-digit reference: 1e-12 relative at
    the default tol, for inner products from -1 to 1 - 1e-12."""
    one = torch.tensor(1.0, dtype=F64)
    near_one = [1.0 - 2.0**-k for k in (10, 20, 30, 40, 45)]
    inner = torch.tensor([-1.0, -0.5, 0.0, 0.5, 0.9, 0.99, *near_one, 1.0], dtype=F64)
    theta = deq.deq_ntk_from_inner(inner, **_variances(setting)).gram
    expected = torch.tensor([_mpmath_theta(float(one - c), setting) for c in inner], dtype=F64)
    torch.testing.assert_close(theta, expected, rtol=1e-12, atol=1e-15)


def test_near_duplicate_inputs_are_exact_against_mpmath():
    """Near-duplicate images at (0.9, 0.05, 0.05) (2.3e-5 relative before): the Gram's entries
    against the 50-digit reference on the same 1 - x.y (|x - y|^2 / 2 for near-duplicates, as the
    Gram computes it, the float64 rows taken exactly)."""
    import mpmath

    setting = (0.9, 0.05, 0.05)
    g = torch.Generator().manual_seed(3)
    base, noise = torch.randn(2, 40, generator=g, dtype=F64)
    X = torch.stack([base + scale * noise for scale in (0.0, 1e-9, 1e-7, 1e-5, 1e-3, 1e-1)])
    X = X / X.norm(dim=1, keepdim=True)
    gram = deq.deq_ntk(X, **_variances(setting)).gram
    with mpmath.workdps(50):
        rows = [[mpmath.mpf(float(v)) for v in x] for x in X]
        for i, j in [(i, j) for i in range(len(X)) for j in range(len(X))]:
            inner = mpmath.fsum(a * b for a, b in zip(rows[i], rows[j]))
            close = 1 - inner < 1.4901161193847656e-08  # the Gram's sqrt(eps) threshold
            delta_x = mpmath.fsum((a - b) ** 2 for a, b in zip(rows[i], rows[j])) / 2 if close else 1 - inner
            assert float(gram[i, j]) == pytest.approx(_mpmath_theta(delta_x, setting), rel=1e-12), (i, j)


def test_paper_value_is_the_060_040_0_setting():
    # x.y = 0.5 gives 1.064349 at (0.6, 0.4, 0) only; (0.25, 0.25, 0.5) gives 1.055466 and
    # (0.8, 0.2, 0) 1.739652.
    values = [float(deq.deq_ntk_from_inner(0.5, **_variances(s)).gram) for s in SETTINGS]
    assert values == pytest.approx([1.055466, 1.064349, 1.739652], abs=1e-6)


def test_kappas():
    rho = torch.linspace(-1, 1, 101, dtype=F64)
    torch.testing.assert_close(deq.kappa1(rho), torch.tensor([_k1(float(r)) for r in rho], dtype=F64))
    torch.testing.assert_close(deq.kappa0(rho), torch.tensor([_k0(float(r)) for r in rho], dtype=F64))
    assert float(deq.kappa1(1.0)) == 1.0 and float(deq.kappa1(-1.0)) == 0.0
    assert float(deq.kappa1(0.0)) == pytest.approx(1 / math.pi, abs=1e-15)
    assert float(deq.kappa0(0.0)) == pytest.approx(0.5, abs=1e-15)
    # Rounding past +-1 is clipped, not NaN.
    assert deq.kappa1(torch.tensor([1 + 1e-12, -1 - 1e-12])).tolist() == [1.0, 0.0]


# ---------------------------------------------------------------------------
# 2-4. diagonal, symmetry, positive semi-definiteness, blocking
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("setting", SETTINGS)
def test_diagonal_is_one_over_one_minus_sigma_w2(setting):
    X = _unit_rows(40, 12)
    expected = torch.full((40,), 1 / (1 - setting[0]), dtype=F64)
    torch.testing.assert_close(
        deq.deq_ntk(X, **_variances(setting)).gram.diagonal(), expected, rtol=1e-14, atol=0
    )
    # Also when the same rows come as X and as Y (no shortcut for the Gram's diagonal).
    torch.testing.assert_close(
        deq.deq_ntk(X, X.clone(), **_variances(setting)).gram.diagonal(), expected, rtol=1e-14, atol=0
    )
    torch.testing.assert_close(
        deq.deq_nngp(X, **_variances(setting)).gram.diagonal(), torch.ones(40, dtype=F64)
    )


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("data", ["gaussian", "cifar_like"])
def test_gram_is_symmetric_psd(setting, data):
    X = _unit_rows(150, 20, seed=1) if data == "gaussian" else _cifar_like(150, 200, seed=1)
    for gram in (deq.deq_ntk(X, **_variances(setting)).gram, deq.deq_nngp(X, **_variances(setting)).gram):
        assert torch.equal(gram, gram.T)
        eigenvalues = torch.linalg.eigvalsh(gram)
        assert eigenvalues[0] >= -1e-10 * eigenvalues[-1]


def test_blocked_equals_unblocked_and_cross_grams_match_stacked():
    setting = _variances((0.6, 0.4, 0.0))
    X, Y = _unit_rows(37, 9, seed=2), _unit_rows(23, 9, seed=3)
    Y[5] = X[4]  # a row shared between X and Y
    whole = deq.deq_ntk(X, **setting, block_rows=37).gram
    for rows in (1, 7, 36):
        torch.testing.assert_close(deq.deq_ntk(X, **setting, block_rows=rows).gram, whole, rtol=0, atol=1e-12)
    stacked = deq.deq_ntk(torch.cat([X, Y]), **setting, block_rows=11).gram
    cross = deq.deq_ntk(X, Y, **setting, block_rows=5)
    torch.testing.assert_close(cross.gram, stacked[:37, 37:], rtol=0, atol=1e-12)
    torch.testing.assert_close(deq.deq_ntk(Y, X, **setting).gram, stacked[37:, :37], rtol=0, atol=1e-12)
    assert float(cross.gram[4, 5]) == pytest.approx(1 / (1 - 0.6), abs=1e-14)
    depth_stacked = deq.ntk(torch.cat([X, Y]), depth=3, **setting)
    torch.testing.assert_close(
        deq.ntk(X, Y, depth=3, **setting, block_rows=4), depth_stacked[:37, 37:], rtol=0, atol=1e-12
    )


def test_inputs_numpy_float32_and_normalize():
    setting = _variances((0.25, 0.25, 0.5))
    X = _unit_rows(20, 6, seed=4)
    reference = deq.deq_ntk(X, **setting).gram
    from_numpy = deq.deq_ntk(X.numpy(), **setting).gram
    assert from_numpy.dtype == F64 and torch.equal(from_numpy, reference)
    scaled = X * torch.linspace(0.5, 3.0, 20, dtype=F64)[:, None]
    torch.testing.assert_close(
        deq.deq_ntk(scaled, **setting, normalize=True).gram, reference, rtol=0, atol=1e-12
    )
    single = deq.deq_ntk(X.float(), **setting).gram
    assert single.dtype == torch.float32
    torch.testing.assert_close(single.double(), reference, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------
# 5. finite depth
# ---------------------------------------------------------------------------


def test_depth_one_and_two_match_the_recursion():
    X = _unit_rows(6, 5, seed=5)
    # x.x is exactly 1: a rounded one would meet kappa0's singularity at 1 (and be off by 1e-9).
    inner = (X @ X.T).fill_diagonal_(1.0)
    for setting in SETTINGS:
        for depth in (1, 2):
            ref = [[_reference_depth(float(c), setting, depth) for c in row] for row in inner]
            sigma = torch.tensor([[s for s, _ in row] for row in ref], dtype=F64)
            theta = torch.tensor([[t for _, t in row] for row in ref], dtype=F64)
            torch.testing.assert_close(
                deq.nngp(X, depth=depth, **_variances(setting)), sigma, rtol=0, atol=1e-13
            )
            torch.testing.assert_close(
                deq.ntk(X, depth=depth, **_variances(setting)), theta, rtol=0, atol=1e-13
            )


@pytest.mark.parametrize("setting", SETTINGS)
def test_depth_ntk_tends_to_deq_ntk_for_unit_inputs(setting):
    X = _cifar_like(30, 50, seed=6)
    target = deq.deq_ntk(X, **_variances(setting), tol=1e-13).gram
    errors = [
        float((deq.ntk(X, depth=L, **_variances(setting)) - target).abs().max()) for L in (5, 20, 50, 200)
    ]
    assert errors == sorted(errors, reverse=True)
    assert errors[-1] <= 1e-6
    nngp_target = deq.deq_nngp(X, **_variances(setting), tol=1e-13).gram
    torch.testing.assert_close(deq.nngp(X, depth=200, **_variances(setting)), nngp_target, rtol=0, atol=1e-6)


def test_depth_ntk_diverges_at_sigma_w2_one():
    # Only sigma_w2 < 1 has a limit: at 1 (the plain deep ReLU NTK) the diagonal is L + 1.
    X = _unit_rows(5, 4, seed=7)
    for depth in (1, 10, 200):
        torch.testing.assert_close(
            deq.ntk(X, depth=depth, sigma_w2=1.0, sigma_u2=0.0, sigma_b2=0.0).diagonal(),
            torch.full((5,), depth + 1.0, dtype=F64),
        )
    with pytest.raises(ValueError, match="sigma_w2 < 1"):
        deq.deq_ntk(X, sigma_w2=1.0, sigma_u2=0.0, sigma_b2=0.0)


# ---------------------------------------------------------------------------
# 6. finite width
# ---------------------------------------------------------------------------


def test_finite_width_formula_matches_autograd():
    width, setting = 16, (0.25, 0.25, 0.5)
    w, u, b = setting
    X = _unit_rows(2, 3, seed=8)
    result = deq.finite_deq_ntk(
        X, width=width, **_variances(setting), generator=torch.Generator().manual_seed(0)
    )
    assert result.residual <= 1e-12
    g = torch.Generator().manual_seed(0)  # the same draws, in the documented order W, U, b
    params = (
        torch.randn(width, width, generator=g, dtype=F64),
        torch.randn(width, 3, generator=g, dtype=F64),
    )
    params = (*params, torch.randn(width, generator=g, dtype=F64))

    def equilibrium(params, x):
        W, U, bias = params
        f = torch.zeros(width, dtype=F64)
        for _ in range(200):
            f = (
                math.sqrt(w / width) * W @ (math.sqrt(2) * torch.relu(f))
                + math.sqrt(u) * U @ x
                + math.sqrt(b) * bias
            )
        return f

    jacobians = [torch.func.jacrev(equilibrium)(params, x) for x in X]
    expected = torch.tensor(
        [
            [
                sum(float((jx.reshape(width, -1) * jy.reshape(width, -1)).sum()) for jx, jy in zip(Jx, Jy))
                / width
                for Jy in jacobians
            ]
            for Jx in jacobians
        ],
        dtype=F64,
    )
    torch.testing.assert_close(result.gram, expected, rtol=1e-9, atol=0)


def test_finite_width_deq_matches_deq_ntk():
    """At (.25, .25, .5) the per-seed spread is about 3.5 % at width 1000 (ours; 15-20 % at
    (.6, .4, 0), where a 1 % check would need hundreds of times the seeds): the mean of 128
    networks is within 1 % of Theta* in every entry (measured: within 0.34 %, 0.30 % standard
    error; the finite-width bias at width 1000 is a few tenths of a percent)."""
    setting = (0.25, 0.25, 0.5)
    X = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.5, math.sqrt(0.75), 0.0, 0.0]], dtype=F64)
    target = deq.deq_ntk(X, **_variances(setting)).gram
    # float32: the inverses take half the time, and their rounding is far below the 1 %.
    samples = torch.stack(
        [
            deq.finite_deq_ntk(
                X.float(), width=1000, **_variances(setting), generator=torch.Generator().manual_seed(seed)
            ).gram.double()
            for seed in range(128)
        ]
    )
    relative = samples.mean(0) / target - 1
    assert bool((relative.abs() <= 0.01).all()), f"relative errors {relative.tolist()}"
    z = relative * target / (samples.std(0) / math.sqrt(len(samples)))
    assert bool((z.abs() <= 4).all()), f"z-scores {z.tolist()}"


# ---------------------------------------------------------------------------
# 7. errors
# ---------------------------------------------------------------------------


def test_bad_variances_raise():
    X = _unit_rows(4, 3)
    for bad, message in [
        ((-0.1, 0.6, 0.5), "sigma_w2 must be a finite variance >= 0"),
        ((0.5, -0.1, 0.6), "sigma_u2 must be a finite variance >= 0"),
        ((0.5, 0.3, 0.1), "must be 1"),
        ((0.5, 0.5, 1e-8), "must be 1"),
        ((1.0, 0.0, 0.0), "sigma_w2 < 1"),
        ((1.2, -0.1, -0.1), ">= 0"),
        ((float("nan"), 0.5, 0.5), "finite"),
    ]:
        with pytest.raises(ValueError, match=message):
            deq.deq_ntk(X, **_variances(bad))
    deq.deq_ntk(X, **_variances((0.5, 0.5, 1e-10)))  # within the 1e-9 tolerance
    with pytest.raises(ValueError, match="sigma_w2 must be <= 1"):
        deq.ntk(X, depth=2, **_variances((1.0 + 1e-10, 0.0, 0.0)))
    with pytest.raises(ValueError, match="depth"):
        deq.ntk(X, depth=0, **_variances((0.5, 0.5, 0.0)))


def test_bad_inputs_raise():
    setting = _variances((0.6, 0.4, 0.0))
    with pytest.raises(ValueError, match="normalize=True"):
        deq.deq_ntk(2 * _unit_rows(4, 3), **setting)
    with pytest.raises(ValueError, match="normalize=True"):
        deq.deq_ntk(_unit_rows(4, 3), 2 * _unit_rows(4, 3), **setting)
    with pytest.raises(ValueError, match="zero norm"):
        deq.deq_ntk(torch.zeros(2, 3, dtype=F64), **setting, normalize=True)
    for bad in (torch.ones(3, dtype=F64), torch.ones(2, 2, 2, dtype=F64), torch.empty(0, 3, dtype=F64)):
        with pytest.raises(ValueError, match="2-D|non-empty"):
            deq.deq_ntk(bad, **setting, normalize=True)
    with pytest.raises(ValueError, match="NaN"):
        deq.deq_ntk(torch.tensor([[1.0, float("nan")]]), **setting)
    with pytest.raises(ValueError, match="same number of features"):
        deq.deq_ntk(_unit_rows(2, 3), _unit_rows(2, 4), **setting)
    with pytest.raises(ValueError, match="pixel"):
        deq.conv_deq_ntk(torch.ones(2, 3, 4, 4), **setting)
    with pytest.raises(ValueError, match="images, channels, H, W"):
        deq.conv_deq_ntk(torch.ones(2, 3, 4), **setting, normalize=True)


# ---------------------------------------------------------------------------
# 8. kernel regression
# ---------------------------------------------------------------------------


def _clusters(per_class, seed):
    g = torch.Generator().manual_seed(seed)
    centres = torch.eye(3, 8, dtype=F64) * 3
    X = torch.cat([c + 0.5 * torch.randn(per_class, 8, generator=g, dtype=F64) for c in centres])
    return X / X.norm(dim=1, keepdim=True), torch.arange(3).repeat_interleave(per_class)


def test_kernel_regression_interpolates_and_classifies():
    setting = _variances((0.6, 0.4, 0.0))
    X, y = _clusters(10, seed=9)
    X_test, y_test = _clusters(20, seed=10)
    K = deq.deq_ntk(X, **setting).gram
    K_test = deq.deq_ntk(X_test, X, **setting).gram
    fit = deq.kernel_regression(K, y, K, num_classes=3)
    targets = deq.regression_targets(y, 3)
    assert targets[0].tolist() == pytest.approx([0.9, -0.1, -0.1])
    torch.testing.assert_close(fit.scores, targets, rtol=0, atol=1e-8)
    assert torch.equal(fit.predictions, y)
    # The solve reports itself: Cholesky on a positive definite kernel, and its residual, which is
    # the training scores' distance from the targets (they are the same product here).
    assert fit.solver == "cholesky"
    expected = float(torch.linalg.matrix_norm(fit.scores - targets) / torch.linalg.matrix_norm(targets))
    assert fit.residual == pytest.approx(expected, rel=1e-6, abs=1e-15) and fit.residual < 1e-10
    indefinite = deq.kernel_regression(
        torch.diag(torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64)),
        [0, 1, 2],
        torch.eye(3, dtype=torch.float64),
        num_classes=3,
    )
    assert indefinite.solver == "lu" and indefinite.residual < 1e-15
    test = deq.kernel_regression(K, y.numpy(), K_test, num_classes=3)
    assert test.predictions.dtype == torch.int64 and torch.equal(test.predictions, y_test)
    # A ridge stops interpolating, and a huge one leaves scores = K_test T / ridge.
    ridged = deq.kernel_regression(K, y, K, num_classes=3, ridge=1.0)
    assert float((ridged.scores - targets).abs().max()) > 1e-3
    assert torch.equal(deq.kernel_regression(K, y, K_test, num_classes=3, ridge=1.0).predictions, y_test)
    huge = deq.kernel_regression(K, y, K_test, num_classes=3, ridge=1e9)
    torch.testing.assert_close(huge.scores * 1e9, K_test @ targets, rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match="labels must lie"):
        deq.kernel_regression(K, y + 1, K, num_classes=3)
    with pytest.raises(ValueError, match="K_test_train"):
        deq.kernel_regression(K, y, K[:, :5], num_classes=3)


# ---------------------------------------------------------------------------
# 9. iteration counts
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "low", "high"), [(SETTINGS[0], 2, 4), (SETTINGS[1], 3, 5), (SETTINGS[2], 4, 6)]
)
def test_iteration_counts(setting, low, high):
    # Ours, not the paper's (it uses the modified Powell hybrid method and reports no count for the
    # fully connected kernel): Newton's steps to 1e-10 relative, the last (the first of at most tol)
    # included, on correlations of 0.73-0.93 as in raw images: 3 / 4 / 5 (the fixed-point iteration
    # it replaced needed 15 / 29 / 54 to an absolute 1e-10).
    result = deq.deq_ntk(_cifar_like(150, 300, seed=11), **_variances(setting), tol=1e-10)
    assert low <= result.iterations <= high
    assert result.residual <= 1e-10


def test_unconverged_iteration_warns():
    with pytest.warns(RuntimeWarning, match="max_iter"):
        result = deq.deq_ntk(_unit_rows(5, 3), **_variances((0.8, 0.2, 0.0)), max_iter=3)
    assert result.iterations == 3 and result.residual > 1e-10


# ---------------------------------------------------------------------------
# Convolutional DEQ-NTK
# ---------------------------------------------------------------------------


def _pixel_unit_images(n, channels, height, width, seed):
    X = torch.randn(n, channels, height, width, generator=torch.Generator().manual_seed(seed), dtype=F64)
    return X / X.norm(dim=1, keepdim=True)


@pytest.mark.parametrize("pooling", ["gap", "flatten"])
def test_conv_on_one_pixel_images_is_the_fc_kernel(pooling):
    X = _unit_rows(7, 5, seed=12)
    for setting in SETTINGS:
        conv = deq.conv_deq_ntk(X[:, :, None, None], **_variances(setting), pooling=pooling, tol=1e-13).gram
        # The convolutional kernel iterates to a step of 1e-13, within 1e-13 sigma_w2 / (1 - sigma_w2)
        # of the fixed point, and Theta* moves by up to about 40 times that near rho = 1 (the module's
        # docstring); the fully connected one is exact (Newton).
        torch.testing.assert_close(
            conv, deq.deq_ntk(X, **_variances(setting), tol=1e-13).gram, rtol=0, atol=2e-11
        )


def test_conv_gram_symmetric_psd_and_diagonal():
    setting = (0.6, 0.4, 0.0)
    X = _pixel_unit_images(6, 3, 8, 8, seed=13)
    for pooling in ("gap", "flatten", "trace"):
        result = deq.conv_deq_ntk(X, **_variances(setting), pooling=pooling)
        assert result.residual <= 1e-10
        assert torch.equal(result.gram, result.gram.T)
        eigenvalues = torch.linalg.eigvalsh(result.gram)
        assert eigenvalues[0] >= -1e-10 * eigenvalues[-1]
    flatten = deq.conv_deq_ntk(X, **_variances(setting), pooling="flatten").gram
    torch.testing.assert_close(flatten.diagonal(), torch.full((6,), 2.5, dtype=F64), rtol=1e-9, atol=0)
    # Tr(Kdot* . Theta + K*) of an image with itself: 64 positions of sigma_w2 * 2.5 + 1 = 2.5
    trace = deq.conv_deq_ntk(X, **_variances(setting), pooling="trace").gram
    torch.testing.assert_close(trace.diagonal(), torch.full((6,), 160.0, dtype=F64), rtol=1e-9, atol=0)
    full = deq.conv_deq_ntk(X[:2], **_variances(setting), pooling="none").gram
    assert full.shape == (2, 2, 8, 8, 8, 8)
    torch.testing.assert_close(full[1, 0], full[0, 1].permute(2, 3, 0, 1), rtol=0, atol=1e-14)
    torch.testing.assert_close(full[0, 0].reshape(64, 64).diagonal(), torch.full((64,), 2.5, dtype=F64))


def test_conv_blocks_and_cross_grams_agree():
    setting = _variances((0.8, 0.2, 0.0))
    X, Y = _pixel_unit_images(4, 2, 5, 6, seed=14), _pixel_unit_images(3, 2, 5, 6, seed=15)
    whole = deq.conv_deq_ntk(torch.cat([X, Y]), **setting).gram
    torch.testing.assert_close(
        deq.conv_deq_ntk(torch.cat([X, Y]), **setting, block_pairs=1).gram, whole, rtol=0, atol=1e-12
    )
    torch.testing.assert_close(
        deq.conv_deq_ntk(X, Y, **setting, block_pairs=5).gram, whole[:4, 4:], rtol=0, atol=1e-12
    )


def _dense_conv_reference(x, y, setting):
    """Theta (P, P) of one image pair from an explicit (P^2 x P^2) operator T and a linear solve."""
    w, u, b = setting
    _, H, W = x.shape
    positions = [(i, j) for i in range(H) for j in range(W)]
    P = len(positions)
    count = {
        (i, j): sum(0 <= i + a < H and 0 <= j + c < W for a in (-1, 0, 1) for c in (-1, 0, 1))
        for i, j in positions
    }
    T = np.zeros((P * P, P * P))
    for p, (i, j) in enumerate(positions):
        for q, (k, m) in enumerate(positions):
            for a in (-1, 0, 1):
                for c in (-1, 0, 1):
                    if 0 <= i + a < H and 0 <= j + c < W and 0 <= k + a < H and 0 <= m + c < W:
                        source = positions.index((i + a, j + c)) * P + positions.index((k + a, m + c))
                        T[p * P + q, source] += 1 / math.sqrt(count[(i, j)] * count[(k, m)])
    pixels = (x.reshape(x.shape[0], -1).T @ y.reshape(y.shape[0], -1)).numpy().reshape(-1)
    inputs = T @ pixels
    sigma = pixels.copy()
    for _ in range(400):
        sigma = w * (T @ np.array([_k1(s) for s in sigma])) + u * inputs + b
    gate = np.array([_k0(s) for s in sigma])
    theta = np.linalg.solve(np.eye(P * P) - w * T * gate[None, :], sigma)
    return torch.tensor(theta.reshape(P, P))


@pytest.mark.parametrize("setting", [(0.6, 0.3, 0.1), (0.8, 0.2, 0.0)])
def test_conv_matches_dense_linear_solve(setting):
    X = _pixel_unit_images(2, 3, 3, 4, seed=16)  # 3x4: a mix-up of H and W would show
    full = deq.conv_deq_ntk(X, **_variances(setting), pooling="none", tol=1e-13).gram
    reference = _dense_conv_reference(X[0], X[1], setting)
    torch.testing.assert_close(full[0, 1].reshape(12, 12), reference, rtol=0, atol=1e-10)
    # An image with itself: the reference's x_p.x_p and Sigma(p, p) round to 1 - 1e-16 at times,
    # which kappa0's singularity turns into 1e-7 (the library works with 1 - rho, exact there).
    reference = _dense_conv_reference(X[1], X[1], setting)
    torch.testing.assert_close(full[1, 1].reshape(12, 12), reference, rtol=0, atol=1e-6)


def test_kernel_regression_refuses_a_non_symmetric_k_train():
    """A square test-train Gram passed as K_train: the Cholesky solve would read one triangle."""
    setting = _variances((0.6, 0.4, 0.0))
    X, y = _clusters(10, seed=9)
    X_test, _ = _clusters(10, seed=10)
    square = deq.deq_ntk(X_test, X, **setting).gram  # (30, 30), not symmetric
    assert deq.symmetry_error(square) > 1e-2
    with pytest.raises(ValueError, match=r"K_train must be symmetric .* was a test-train Gram passed"):
        deq.kernel_regression(square, y, square, num_classes=3)
    # rounding-level asymmetry (as from X @ X.T in another order) is accepted
    K = deq.deq_ntk(X, **setting).gram
    nearly = K + 1e-12 * torch.triu(torch.ones_like(K), 1)
    assert 0 < deq.symmetry_error(nearly) < 1e-11
    assert torch.equal(deq.kernel_regression(nearly, y, K, num_classes=3).predictions, y)


@pytest.mark.parametrize("ridge", [0.0, 0])
def test_singular_k_train_says_to_set_a_ridge_or_remove_duplicates(ridge):
    setting = _variances((0.6, 0.4, 0.0))
    X, y = _clusters(5, seed=9)
    X = torch.cat([X, X[:3]])  # three duplicate images
    y = torch.cat([y, y[:3]])
    K = deq.deq_ntk(X, **setting).gram
    K = torch.ones_like(K)  # every row equal: exactly singular
    with pytest.raises(deq.SingularKernelError, match=r"is singular.*17 of its rows repeat.*pass ridge > 0"):
        deq.kernel_regression(K, y, K, num_classes=3, ridge=ridge)
    assert issubclass(deq.SingularKernelError, torch.linalg.LinAlgError)  # regression_accuracy's NaN
    # and the ridge it suggests solves it
    fit = deq.kernel_regression(K, y, K, num_classes=3, ridge=1e-6)
    assert torch.isfinite(fit.scores).all()


def test_the_ridge_suggested_for_an_all_zero_k_train_is_positive_and_works():
    """An all-zero K_train has no scale (its mean diagonal is 0, once suggested as the ridge "0"):
    the error suggests ridge 1, says why, and that ridge solves it."""
    _, y = _clusters(4, seed=9)
    K = torch.zeros(len(y), len(y), dtype=torch.float64)
    with pytest.raises(
        deq.SingularKernelError, match=r"pass ridge > 0 \(e\.g\. 1: K_train is zero everywhere"
    ):
        deq.kernel_regression(K, y, K, num_classes=3)
    fit = deq.kernel_regression(K, y, K, num_classes=3, ridge=1.0)
    assert torch.isfinite(fit.scores).all() and fit.solver == "cholesky"
    # A scale where the diagonal has none: the largest entry's.
    from intertwine.kernels.regression import _suggested_ridge

    K = torch.tensor([[0.0, 4.0], [4.0, 0.0]], dtype=torch.float64)
    assert "1e-6 times the largest entry (the diagonal is 0), 4e-06" in _suggested_ridge(K)


@pytest.mark.parametrize(
    "value, message",
    [(None, "sigma_w2 must be a number"), ("0.6", "sigma_w2 must be a number"), (True, "must be a number")],
)
def test_variances_that_are_not_numbers(value, message):
    X, _ = _clusters(3, seed=9)
    with pytest.raises(ValueError, match=message):
        deq.deq_ntk(X, sigma_w2=value, sigma_u2=0.4, sigma_b2=0.0)
