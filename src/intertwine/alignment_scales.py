"""Weight matching's G_ReLU scales solved jointly once its permutations are fixed.

Coordinate descent (``network_alignment.weight_matching``) solves one variable's scales with the
others held: without batch norm a site's scale multiplies its producer's weights and divides its
consumer's, which the next site's scale multiplies, so neighbouring scales are coupled and the
descent creeps (a Myrtle's scales were 1.3e-4 off after 100 sweeps). With the permutations fixed
the squared parameter distance is a smooth function of the log-scales u,

    sum over parameters p of || F_p - G_p * exp(u[row_p]) / exp(u[col_p]) ||^2

(rows: the channels a site's scale multiplies, columns: those it divides), which Gauss-Newton with
a Levenberg-Marquardt safeguard minimises to rounding in a few steps (quadratically where g is f
moved by a group element, the residual then vanishing)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def scale_indices(variables, sites) -> tuple[dict[str, Tensor], list[tuple[int, str, int, int]]]:
    """Per site, each channel's index into the vector of free log-scales (``n``, a slot held at
    0, where its scale is fixed to 1), and the vector's segments: (variable index, scale class,
    start, size)."""
    index = {site.name: None for site in sites}
    segments, start = [], 0
    for k, variable in enumerate(variables):
        for cls in sorted({c for c in variable.scale_class.values() if c is not None}):
            segments.append((k, cls, start, variable.size))
            start += variable.size
    n = start
    for site in sites:
        index[site.name] = torch.full((site.channels,), n, dtype=torch.long)
    offsets = {(k, cls): begin for k, cls, begin, _ in segments}
    for k, variable in enumerate(variables):
        for site, channels in variable.at.items():
            cls = variable.scale_class[site]
            if cls is not None:
                index[site][channels] = offsets[(k, cls)] + torch.arange(variable.size)
    return index, segments


def _scaled_parameters(f: nn.Module, g: nn.Module, wired, index: dict[str, Tensor], n: int):
    """(F, G, rows, cols) per parameter a scale acts on, as (out, in, rest) float64 arrays with
    each row's and column's log-scale index (``n``: none); None where a parameter's layout is not
    one a scale acts on by rows and columns alone (then nothing is refined)."""
    rows: dict[str, Tensor] = {}
    cols: dict[str, Tensor] = {}
    for site, producers in wired.producers.items():
        for conv, norm in producers:
            norm_module = g.get_submodule(norm)
            owner = norm if isinstance(norm_module, nn.modules.batchnorm._BatchNorm) else conv
            for kind in ("weight", "bias"):
                if getattr(g.get_submodule(owner), kind, None) is not None:
                    if f"{owner}.{kind}" in rows:
                        return None  # two sites' scales on one parameter's rows: not this layout
                    rows[f"{owner}.{kind}"] = index[site]
        for consumer in wired.consumers.get(site, []):
            if f"{consumer}.weight" in cols:
                return None
            cols[f"{consumer}.weight"] = index[site]
    terms = []
    params_f = dict(f.named_parameters())
    for name, b in g.named_parameters():
        if name not in rows and name not in cols:
            continue
        a = params_f[name].detach().to("cpu", torch.float64)
        b = b.detach().to("cpu", torch.float64)
        shape = (b.shape[0], b.shape[1] if b.dim() > 1 else 1, -1)
        row = rows.get(name, torch.full((shape[0],), n, dtype=torch.long))
        col = cols.get(name, torch.full((shape[1],), n, dtype=torch.long))
        if len(row) != shape[0] or len(col) != shape[1]:
            return None
        terms.append((a.reshape(shape), b.reshape(shape), row, col))
    return terms


def _residual(terms, u: Tensor) -> tuple[float, list]:
    out, total = [], 0.0
    for a, b, row, col in terms:
        q = b * torch.exp(u[row])[:, None, None] * torch.exp(-u[col])[None, :, None]
        r = a - q
        total += float(r.square().sum())
        out.append((q, r, row, col))
    return total, out


def _gauss_newton_system(parts, size: int) -> tuple[Tensor, Tensor]:
    """(gradient, Gauss-Newton Hessian 2 J^T J) of the summed squared residuals in the log-scales:
    an entry's residual r = a - q moves by -q with its row's log-scale and by +q with its
    column's (by nothing where both are the same scale)."""
    grad = torch.zeros(size, dtype=torch.float64)
    hessian = torch.zeros(size, size, dtype=torch.float64)
    for q, r, row, col in parts:
        rq, qq = (r * q).sum(-1), q.square().sum(-1)  # (rows, cols)
        grad.index_add_(0, row, -2 * rq.sum(1))
        grad.index_add_(0, col, 2 * rq.sum(0))
        hessian.index_put_((row, row), 2 * qq.sum(1), accumulate=True)
        hessian.index_put_((col, col), 2 * qq.sum(0), accumulate=True)
        rows = row[:, None].expand_as(qq).reshape(-1)
        cols = col[None, :].expand_as(qq).reshape(-1)
        hessian.index_put_((rows, cols), -2 * qq.reshape(-1), accumulate=True)
        hessian.index_put_((cols, rows), -2 * qq.reshape(-1), accumulate=True)
    return grad, hessian


def refine_scales(f: nn.Module, g: nn.Module, variables, wired, sites, max_steps: int = 100):
    """Log-scale corrections per (variable index, scale class), to multiply into the scales of the
    aligned ``g``, that minimise the squared parameter distance to ``f`` jointly (the permutations
    already applied in ``g``); None where there is nothing to refine."""
    index, segments = scale_indices(variables, sites)
    n = sum(size for *_, size in segments)
    terms = _scaled_parameters(f, g, wired, index, n) if n else None
    if not terms:
        return None
    u = torch.zeros(n + 1, dtype=torch.float64)  # the last slot: the fixed scales, held at log 1 = 0
    value, parts = _residual(terms, u)
    damping = 0.0
    for _ in range(max_steps):
        grad, hessian = _gauss_newton_system(parts, n + 1)
        grad, hessian = grad[:n], hessian[:n, :n]
        active = hessian.diagonal() > 0
        if not active.any():
            break
        h = hessian[active][:, active]
        step = torch.zeros(n, dtype=torch.float64)
        while True:
            damped = h + torch.diag(damping * h.diagonal())
            step[active] = -torch.linalg.solve(damped, grad[active])
            trial = u.clone()
            trial[:n] += step
            trial_value, trial_parts = _residual(terms, trial)
            if trial_value <= value or damping > 1e12:
                break
            damping = max(10 * damping, 1e-8)
        if trial_value > value:
            break
        converged = value - trial_value <= 1e-15 * value or float(step.abs().max()) < 1e-15
        u, value, parts, damping = trial, trial_value, trial_parts, damping / 10
        if converged:
            break
    return {(k, cls): torch.exp(u[start : start + size]) for k, cls, start, size in segments}
