"""The minimisers every calibration uses, in one place.

:func:`nelder_mead`: a small derivative-free simplex for the few-parameter, piecewise smooth fits
of cost models, where gradients are unavailable at the kinks of max() and min() (kernel cost
model, GEMM shape model). :func:`huber_least_squares`: Levenberg-Marquardt on robustly weighted
residuals (the collective model against nccl-tests logs).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


def nelder_mead(
    f: Callable[[F64], float], x0: F64, step: float = 0.5, max_evals: int = 4000
) -> tuple[F64, float]:
    """Minimise ``f`` from ``x0`` (standard reflection/expansion/contraction/shrink)."""
    n = len(x0)
    simplex = [x0.copy()] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    evals = n + 1
    while evals < max_evals:
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if (
            abs(values[-1] - values[0]) <= 1e-10 * (abs(values[0]) + 1e-12)
            and np.max(np.abs(np.array(simplex[1:]) - simplex[0])) < 1e-6
        ):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        xr = centroid + (centroid - worst)
        fr = f(xr)
        evals += 1
        if fr < values[0]:
            xe = centroid + 2.0 * (centroid - worst)
            fe = f(xe)
            evals += 1
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * ((xr if fr < values[-1] else worst) - centroid)
            fc = f(xc)
            evals += 1
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = xc, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
                evals += n
    i = int(np.argmin(values))
    return simplex[i], float(values[i])


def huber_cost(r: F64, huber: float) -> float:
    """Huber loss of residuals ``r``: quadratic within ``huber``, linear beyond."""
    a = np.abs(r)
    return float(np.sum(np.where(a < huber, 0.5 * a * a, huber * (a - 0.5 * huber))))


def huber_least_squares(
    residual: Callable[[F64], F64],
    z0: F64,
    *,
    huber: float,
    max_iter: int = 100,
) -> tuple[F64, int]:
    """Levenberg-Marquardt with iteratively reweighted Huber weights and a forward-difference
    Jacobian. The model is only piecewise smooth (algorithm choices, min/max of bandwidths),
    so this finds a local minimum near the start: the defaults, which the prior also favours."""

    def cost(r: F64) -> float:
        return huber_cost(r, huber)

    z = z0.copy()
    r = residual(z)
    c = cost(r)
    lam = 1e-2
    step = 1e-4
    for it in range(1, max_iter + 1):
        jac = np.empty((len(r), len(z)))
        for j in range(len(z)):
            dz = np.zeros_like(z)
            dz[j] = step
            jac[:, j] = (residual(z + dz) - r) / step
        a = np.abs(r)
        w = np.sqrt(np.where(a < huber, 1.0, huber / np.maximum(a, 1e-12)))
        jw = jac * w[:, None]
        rw = r * w
        h = jw.T @ jw
        g = jw.T @ rw
        improved = False
        while lam < 1e10:
            damped = h + lam * (np.diag(np.diag(h)) + 1e-9 * np.eye(len(z)))
            delta = np.asarray(-np.linalg.solve(damped, g), dtype=np.float64)
            r_new = residual(z + delta)
            c_new = cost(r_new)
            if c_new < c:
                improved = abs(c - c_new) > 1e-9 * max(c, 1e-12)
                z, r, c = z + delta, r_new, c_new
                lam = max(lam / 3, 1e-9)
                break
            lam *= 4
        if not improved:
            return z, it
    return z, max_iter
