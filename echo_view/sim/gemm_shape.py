"""GEMM time from the matrix shape: output tiles, waves over the SMs, and small-K overhead.

A GEMM library splits the ``M x N`` output of each of ``B`` batched products into tiles; each SM
computes one tile at a time, so the kernel runs in *waves* of at most ``SMs`` tiles and a last,
partly filled wave costs as much as a full one (wave quantization). A tile of ``tm x tn`` over
the whole ``K`` depth costs ``2 * tm * tn * (K + k_half)`` FLOPs at the SM's share of the peak
times ``eff``: ``k_half`` is the per-tile prologue/epilogue (loading the first K-slices,
writing the tile) in units of K, which makes small-K products slow. The library picks the tile
that finishes first, so the model takes the best of :data:`TILES`::

    tiles(tm, tn) = B * ceil(M / tm) * ceil(N / tn)
    t(tm, tn)     = ceil(tiles / SMs) * 2 * tm * tn * (K + k_half) / (eff * peak / SMs)
    t_gemm        = max(min over TILES of t(tm, tn) + fixed, FLOPs / (best_frac * peak))

``best_frac`` is the highest fraction of the peak that any GEMM in the fitting table reached: the
model is fitted on shapes of M, N, K <= 4,096, and without that ceiling its large-shape limit
(``eff * K / (K + k_half)``, 0.85-0.88 of the H100 bf16 peak for K of 4,096-16,384) would exceed
every measured rate; large GEMMs on H100 run at 73-81% of peak (``docs/accuracy.md``, "GEMM
shape model").

``eff``, ``k_half`` and ``fixed`` are fitted per GPU and dtype on measured GEMM throughput
(:func:`fit`; the data and the fits are in ``docs/accuracy.md``, "GEMM shape model").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from echo_view.sim.calibrate.optimize import nelder_mead

F64 = npt.NDArray[np.float64]
#: Output tile shapes (rows x columns) the model chooses from: the CUTLASS/cuBLAS tensor-core
#: tile sizes common on Ampere, Hopper and Blackwell (64x128, 128x128, 128x256).
TILES: tuple[tuple[int, int], ...] = ((64, 128), (128, 128), (128, 256))


@dataclass(frozen=True, slots=True)
class GemmShapeParams:
    """Fitted constants of the shape model for one GPU and dtype (see module docstring)."""

    eff: float
    k_half: float
    fixed_ns: float
    source: str = ""
    #: Best measured fraction of the peak in the fitting data: no GEMM is timed faster.
    best_frac: float = 1.0


def gemm_times_ns(dims: npt.NDArray[np.int64], peak: float, sms: int, p: GemmShapeParams) -> F64:
    """Time (ns, float) of each ``(batch, m, n, k)`` row of ``dims`` on a GPU with ``sms`` SMs
    and dense ``peak`` FLOP/s for the GEMM's dtype."""
    d = np.asarray(dims, dtype=np.float64).reshape(-1, 4)
    b, m, n, k = d[:, 0], d[:, 1], d[:, 2], d[:, 3]
    per_sm = p.eff * peak / sms
    tiled = np.full(len(d), np.inf)
    for tm, tn in TILES:
        waves = np.ceil(b * np.ceil(m / tm) * np.ceil(n / tn) / sms)
        tiled = np.minimum(tiled, waves * 2.0 * tm * tn * (k + p.k_half) / per_sm)
    ceiling = 2.0 * b * m * n * k / (p.best_frac * peak)
    out: F64 = np.maximum(tiled + p.fixed_ns * 1e-9, ceiling) * 1e9
    return out


def fit(
    dims: npt.NDArray[np.int64], seconds: Sequence[float] | F64, peak: float, sms: int
) -> tuple[GemmShapeParams, float]:
    """Fit ``eff``, ``k_half`` and ``fixed_ns`` to measured GEMM times (seconds), minimising the
    mean absolute log error (every shape counts alike, small or large); returns the parameters
    and that error."""
    meas = np.asarray(seconds, dtype=np.float64) * 1e9

    def unpack(x: F64) -> GemmShapeParams:
        # Parametrised so that every trial point is physical: eff in (0, 1.5), k_half, fixed >= 0.
        return GemmShapeParams(1.5 / (1.0 + np.exp(-x[0])), abs(x[1]) * 100.0, abs(x[2]) * 1e3)

    def loss(x: F64) -> float:
        pred = gemm_times_ns(dims, peak, sms, unpack(x))
        return float(np.mean(np.abs(np.log(pred / meas))))

    x, err = nelder_mead(loss, np.array([0.5, 1.0, 5.0]), step=0.5, max_evals=6000)
    return unpack(x), err
