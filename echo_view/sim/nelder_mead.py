"""A small derivative-free minimiser (Nelder and Mead's simplex) for the few-parameter, piecewise
smooth fits of cost models, where gradients are unavailable at the kinks of max() and min()."""

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
