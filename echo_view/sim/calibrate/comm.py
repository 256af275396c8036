"""Calibration of the collective models against measured collective times.

A :class:`Measurement` is one timed collective (a row of an nccl-tests log): kind, payload,
ranks placed on a cluster, time. :func:`fit_nccl` and :func:`fit_alphabeta` adjust the models'
physical constants to minimise a robust (Huber) loss on log(predicted / measured) with a weak
prior that pulls every constant towards its default, so constants the data cannot see stay at
NCCL's values instead of drifting. Efficiencies are kept in (0, 1), everything else positive.

nccl-tests times a loop from the host; a thread that drives G GPUs launches G kernels per
iteration, so the measured time is ``max(model time, G * launch_us)`` (``launch_us`` is fitted
when a log has G > 1 and is never used when simulating).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from echo_view.model import CollectiveKind
from echo_view.model.collectives import collective
from echo_view.sim.calibrate.optimize import huber_least_squares
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.alphabeta import AlphaBetaModel, AlphaBetaParams
from echo_view.sim.comm.batch import Batch, build_batch, predict_batch_us
from echo_view.sim.comm.nccl import NcclModel
from echo_view.sim.comm.params import CommParams
from echo_view.sim.comm.placement import place

MIB = 1 << 20
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured collective."""

    kind: CollectiveKind
    nbytes: int
    time_ns: int
    ranks: tuple[int, ...]
    cluster: Cluster
    #: GPUs driven by the host thread that launched it (nccl-tests ``nGpus``).
    gpus_per_thread: int = 1
    #: Where it came from (a file): errors are reported per source.
    source: str = ""
    line: int = 0


@dataclass(frozen=True, slots=True)
class ErrorStats:
    """Mean absolute relative error of one source's measurements, split at 1 MiB."""

    count_large: int
    mae_large: float
    count_small: int
    mae_small: float
    worst: float
    worst_nbytes: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "points_ge_1mib": self.count_large,
            "mae_ge_1mib": self.mae_large,
            "points_lt_1mib": self.count_small,
            "mae_lt_1mib": self.mae_small,
            "worst": self.worst,
            "worst_nbytes": self.worst_nbytes,
        }


P = TypeVar("P", CommParams, AlphaBetaParams)


@dataclass(frozen=True)
class FitResult:
    """Fitted constants and how well they fit."""

    params: CommParams | AlphaBetaParams
    fitted: tuple[str, ...]
    iterations: int
    errors: dict[str, ErrorStats]


# --- prediction ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Data:
    """Measurements laid out for repeated evaluation."""

    measurements: Sequence[Measurement]
    batch: Batch
    gpus: F64
    measured_us: F64


def _prepare(measurements: Sequence[Measurement]) -> _Data:
    tuner = NcclModel()
    items = []
    for m in measurements:
        placement = place(m.ranks, m.cluster)
        options = None
        if placement.nranks > 1 and collective(m.kind).tuned and m.nbytes > 0:
            options = tuner.options(m.kind, m.nbytes, placement, m.cluster)
        items.append((m.kind, m.nbytes, placement, m.cluster, options))
    return _Data(
        measurements,
        build_batch(items),
        np.array([float(m.gpus_per_thread) for m in measurements]),
        np.array([m.time_ns / 1e3 for m in measurements]),
    )


def _nccl_predict(params: CommParams, data: _Data) -> F64:
    us = predict_batch_us(params, data.batch)
    return np.asarray(np.maximum(us, data.gpus * params.launch_us), dtype=np.float64)


def _alphabeta_predict(params: AlphaBetaParams, data: _Data) -> F64:
    model = AlphaBetaModel(params)
    out = np.empty(len(data.measurements))
    for i, m in enumerate(data.measurements):
        us = model.collective_time_ns(m.kind, m.nbytes, m.ranks, m.cluster) / 1e3
        out[i] = max(us, m.gpus_per_thread * params.launch_us)
    return out


def predicted_us(model: NcclModel | AlphaBetaModel, measurements: Sequence[Measurement]) -> F64:
    """What ``model`` predicts each measurement measured (harness floor included), µs."""
    data = _prepare(measurements)
    if isinstance(model, NcclModel):
        return _nccl_predict(model.params, data)
    return _alphabeta_predict(model.params, data)


def error_stats(measurements: Sequence[Measurement], predicted: F64) -> dict[str, ErrorStats]:
    """Per-source mean absolute relative errors (|predicted - measured| / measured)."""
    measured = np.array([m.time_ns / 1e3 for m in measurements])
    rel = np.abs(predicted - measured) / measured
    sizes = np.array([m.nbytes for m in measurements])
    sources = [m.source for m in measurements]
    out: dict[str, ErrorStats] = {}
    for src in dict.fromkeys(sources):
        idx = np.array([s == src for s in sources])
        large = idx & (sizes >= MIB)
        small = idx & (sizes < MIB)
        worst = int(np.argmax(np.where(idx, rel, -1.0)))
        out[src] = ErrorStats(
            int(large.sum()),
            float(rel[large].mean()) if large.any() else math.nan,
            int(small.sum()),
            float(rel[small].mean()) if small.any() else math.nan,
            float(rel[worst]),
            int(sizes[worst]),
        )
    return out


# --- the fitter --------------------------------------------------------------------------

_FRACTIONS = ("_eff",)


def _is_fraction(name: str) -> bool:
    return name.split(".")[0].endswith(_FRACTIONS)


def _to_z(name: str, value: float) -> float:
    if _is_fraction(name):
        # Start inside the interval: at exactly 1 the logistic is flat and cannot move.
        v = min(max(value, 1e-3), 0.99)
        return math.log(v / (1 - v))
    return math.log(max(value, 1e-9))


def _from_z(name: str, z: float) -> float:
    z = min(max(z, -50.0), 50.0)
    if _is_fraction(name):
        return 1.0 / (1.0 + math.exp(-z))
    return math.exp(z)


def _fit(
    base: P,
    candidates: Sequence[str],
    predict: Callable[[P], F64],
    measured: F64,
    *,
    huber: float,
    prior: float,
    free: Sequence[str] = (),
    start_at: dict[str, float] | None = None,
    weights: F64 | None = None,
) -> tuple[P, tuple[str, ...], int]:
    """Fit the ``candidates`` the data is sensitive to; ``free`` ones get no prior."""
    start = {name: base.flat()[name] for name in candidates}
    start.update(start_at or {})
    names = list(candidates)
    z0 = np.array([_to_z(k, start[k]) for k in names])
    log_meas = np.log(measured)
    weights = np.ones(len(measured)) if weights is None else weights
    prior_w = np.array([0.0 if k in free else prior for k in names])

    def params_at(z: F64, keep: Sequence[str]) -> P:
        return base.with_flat({k: _from_z(k, float(v)) for k, v in zip(keep, z, strict=True)})

    def data_residual(z: F64, keep: Sequence[str]) -> F64:
        pred = predict(params_at(z, keep))
        r = np.log(np.maximum(pred, 1e-9)) - log_meas
        return np.asarray(r * weights, dtype=np.float64)

    # Drop constants that no measurement depends on (at their start: a free one starts where
    # it can show), free ones too: kept, they came out at their start value (0.5 for a
    # proxy cost a one-node log cannot see) and were written as fitted.
    r0 = data_residual(z0, names)
    keep = []
    for j in range(len(names)):
        dz = z0.copy()
        dz[j] += 0.05
        if np.max(np.abs(data_residual(dz, names) - r0)) > 1e-9:
            keep.append(j)
    names = [names[j] for j in keep]
    z0, prior_w = z0[keep], prior_w[keep]
    if not names:
        return base, (), 0

    def residual(z: F64) -> F64:
        return np.concatenate([data_residual(z, names), prior_w * (z - z0)])

    z, iterations = huber_least_squares(residual, z0, huber=huber)
    return params_at(z, names), tuple(names), iterations


NCCL_CANDIDATES: tuple[str, ...] = tuple(
    k
    for k in CommParams().flat()
    if not k.startswith(("pcie", "nvls")) and k not in ("protocol_eff.SIMPLE",)
)
ALPHABETA_CANDIDATES: tuple[str, ...] = tuple(
    k for k in AlphaBetaParams().flat() if k != "pcie_eff"
)


def _launch_start(measurements: Sequence[Measurement]) -> dict[str, float]:
    """Start the host launch cost where it just explains the fastest multi-GPU-thread time."""
    multi = [m.time_ns / 1e3 / m.gpus_per_thread for m in measurements if m.gpus_per_thread > 1]
    return {"launch_us": min(multi)} if multi else {}


def _free(measurements: Sequence[Measurement], *others: str) -> tuple[str, ...]:
    """Constants fitted without a prior (their default, 0, is no information)."""
    launch = ("launch_us",) if any(m.gpus_per_thread > 1 for m in measurements) else ()
    return (*launch, *others)


def _balance(measurements: Sequence[Measurement]) -> F64:
    """Weights that give every (source, below / from 1 MiB) class the same total weight, as
    the errors are reported per class; normalised to a mean of 1."""
    keys = [(m.source, m.nbytes >= MIB) for m in measurements]
    counts: dict[tuple[str, bool], int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    w = np.array([1.0 / counts[k] for k in keys])
    return np.asarray(np.sqrt(w / w.mean()), dtype=np.float64)


def fit_nccl(
    measurements: Sequence[Measurement],
    start: CommParams | None = None,
    *,
    huber: float = 0.15,
    prior: float = 0.05,
    source: str | None = None,
    balance: bool = True,
) -> FitResult:
    """Calibrate :class:`NcclModel` to ``measurements``."""
    per_channel = ("channel_us", "proxy_us.LL", "proxy_us.LL128", "proxy_us.SIMPLE")
    result = _calibrate(
        measurements,
        start if start is not None else CommParams(),
        NCCL_CANDIDATES,
        _nccl_predict,
        per_channel,
        dict.fromkeys(per_channel, 0.5),
        huber=huber,
        prior=prior,
        source=source,
        balance=balance,
    )
    return replace(result, params=replace(result.params, **measured_hardware(measurements)))


def measured_hardware(measurements: Sequence[Measurement]) -> dict[str, Any]:
    """The GPU architecture and NIC line rate (GB/s per GPU) the measurements share, as
    :class:`CommParams` records them; a field the measurements disagree on stays unstated."""
    archs = {m.cluster.gpu.arch for m in measurements}
    nics = {m.cluster.nic_bytes_per_s_per_gpu / 1e9 for m in measurements}
    return {
        "arch": archs.pop() if len(archs) == 1 else "",
        "nic_gbytes_per_s": nics.pop() if len(nics) == 1 else 0.0,
    }


def fit_alphabeta(
    measurements: Sequence[Measurement],
    start: AlphaBetaParams | None = None,
    *,
    huber: float = 0.15,
    prior: float = 0.05,
    source: str | None = None,
    balance: bool = True,
) -> FitResult:
    """Calibrate :class:`AlphaBetaModel` to ``measurements`` the same way."""
    return _calibrate(
        measurements,
        start if start is not None else AlphaBetaParams(),
        ALPHABETA_CANDIDATES,
        _alphabeta_predict,
        (),
        {},
        huber=huber,
        prior=prior,
        source=source,
        balance=balance,
    )


def _calibrate(
    measurements: Sequence[Measurement],
    base: P,
    candidates: Sequence[str],
    predict: Callable[[P, _Data], F64],
    free: tuple[str, ...],
    start_at: dict[str, float],
    *,
    huber: float,
    prior: float,
    source: str | None,
    balance: bool,
) -> FitResult:
    """What both fits share: ``free`` constants get no prior and start at ``start_at``; the
    host launch cost is free too when a log can show it."""
    if not measurements:
        raise ValueError("nothing to fit")
    data = _prepare(measurements)
    params, names, iters = _fit(
        base,
        candidates,
        lambda p: predict(p, data),
        data.measured_us,
        huber=huber,
        prior=prior,
        free=_free(measurements, *free),
        start_at={**start_at, **_launch_start(measurements)},
        weights=_balance(measurements) if balance else None,
    )
    label = source or f"calibrated on {len({m.source for m in measurements})} logs"
    params = params.with_flat({}, source=label)
    errors = error_stats(measurements, predict(params, data))
    return FitResult(params, names, iters, errors)


def leave_one_out(
    measurements: Sequence[Measurement],
    fit: Callable[[Sequence[Measurement]], FitResult],
) -> dict[str, ErrorStats]:
    """Held-out errors: each source predicted by constants fitted on all the others."""
    sources = list(dict.fromkeys(m.source for m in measurements))
    out: dict[str, ErrorStats] = {}
    for src in sources:
        train = [m for m in measurements if m.source != src]
        test = [m for m in measurements if m.source == src]
        result = fit(train)
        model: NcclModel | AlphaBetaModel
        if isinstance(result.params, CommParams):
            model = NcclModel(result.params)
        else:
            model = AlphaBetaModel(result.params)
        out.update(error_stats(test, predicted_us(model, test)))
    return out
