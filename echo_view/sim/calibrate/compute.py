"""Fit the kernel cost model (:mod:`echo_view.sim.kernel_cost`) to measured kernels of one GPU
and measure its error on kernels the fit did not see.

The model of one op is ``max((f + f_half) / (peak * eff_max), (b + b_half) / (hbm * mem_eff),
kernel_min)`` — the saturating efficiency makes each roof affine in the op's size — so every
fitted parameter keeps its physical meaning: the best fraction of peak a large kernel reaches,
the size at which it reaches half of that, the shortest kernel. ``kernel_gap_ns`` (idle time
between kernels) is not visible in kernel durations and is neither fitted nor predicted here.

The fit minimises a robust (Huber) loss of ``log(predicted / measured)`` over distinct op
shapes (each shape's median time, so that a shape repeated in every layer does not outweigh
the rest), by Nelder-Mead in a bounded reparametrisation, started from the defaults and from a
weighted least-squares line through each roof. A class's parameters are fitted only when the
data holds at least :data:`MIN_SHAPES` distinct shapes of it; otherwise they keep the defaults.

Held-out error: with several traces of the GPU, each trace is predicted by parameters fitted on
the others, on the shapes the others do not contain (so no kernel shape is both fitted and
tested); when that leaves too few shapes (the ranks of one job repeat each other's), or with
one trace, the shapes are split into folds, each predicted by parameters fitted on the other
folds. Errors are per op (one measured op = the kernels it launched).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.analysis.kernel_fit import KernelSamples
from echo_view.model.graph import OpClass
from echo_view.sim.calibrate.optimize import nelder_mead
from echo_view.sim.cluster import GpuSpec
from echo_view.sim.kernel_cost import ComputeParams, op_times_ns, peak_for

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Parameters a calibration can fit, grouped by the op classes that inform them.
PARAM_GROUPS: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm_eff_max", "gemm_half_flops"),
    "attention": ("attn_eff_max", "attn_half_flops"),
    "memory": ("mem_eff_max", "mem_half_bytes"),
    "min": ("kernel_min_ns",),
}
FITTABLE: tuple[str, ...] = tuple(p for g in PARAM_GROUPS.values() for p in g)
#: Distinct shapes of a class needed before its parameters are fitted.
MIN_SHAPES = 3
#: Held-out folds when splitting by shape.
SHAPE_FOLDS = 5
# Bounds of the search: efficiencies in (1%, 100%]; sizes and times over physical ranges.
_BOUNDS: dict[str, tuple[float, float]] = {
    "eff": (0.01, 1.0),
    "gemm_half_flops": (1e3, 1e13),
    "attn_half_flops": (1e3, 1e13),
    "mem_half_bytes": (1.0, 1e10),
    "kernel_min_ns": (100.0, 50_000.0),
}
_HUBER = 0.2
# A weak pull towards the defaults (per unit of the reparametrised value, squared): it decides
# only directions the data leaves open, such as the peak efficiency when every GEMM measured
# is too small to reach it.
_PRIOR = 1e-4


@dataclass(frozen=True, eq=False)
class FitData:
    """One GPU's samples, ready for the model: per op class, FLOPs, bytes, dtype peak, time."""

    op_class: npt.NDArray[np.uint8]
    flops: F64
    nbytes: F64
    peak: F64
    measured_ns: I64
    shape: npt.NDArray[np.int32]
    trace: npt.NDArray[np.int32]

    def __len__(self) -> int:
        return len(self.measured_ns)

    def take(self, rows: npt.NDArray[Any]) -> FitData:
        return FitData(
            self.op_class[rows],
            self.flops[rows],
            self.nbytes[rows],
            self.peak[rows],
            self.measured_ns[rows],
            self.shape[rows],
            self.trace[rows],
        )


def fit_data(samples: KernelSamples, gpu: GpuSpec) -> FitData:
    """``samples`` (all of one GPU) with each op's dtype peak on ``gpu``."""
    peaks = np.array([peak_for(gpu, d) for d in samples.dtypes] or [0.0], dtype=np.float64)
    return FitData(
        samples.op_class,
        samples.flops,
        samples.nbytes,
        peaks[samples.dtype] if len(samples) else np.empty(0),
        samples.measured_ns,
        samples.shape,
        samples.trace,
    )


def predict_ns(params: ComputeParams, data: FitData, gpu: GpuSpec) -> I64:
    """The model's kernel time of each op (no inter-kernel gap)."""
    return op_times_ns(
        data.op_class, data.flops, data.nbytes, data.peak, gpu, replace(params, kernel_gap_ns=0)
    )


@dataclass(frozen=True, slots=True)
class ErrorStats:
    """Relative errors ``(predicted - measured) / measured`` over ops."""

    ops: int
    median_abs: float
    mean_abs: float
    #: Error of the summed time of the ops (signed).
    total: float

    def as_dict(self) -> dict[str, float | int | None]:
        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 5)

        return {
            "ops": self.ops,
            "median_abs": num(self.median_abs),
            "mean_abs": num(self.mean_abs),
            "total": num(self.total),
        }


def error_stats(predicted: npt.NDArray[Any], measured: npt.NDArray[Any]) -> ErrorStats:
    """:class:`ErrorStats` of ``predicted`` against ``measured`` (NaN when empty)."""
    if not len(measured):
        nan = float("nan")
        return ErrorStats(0, nan, nan, nan)
    m = measured.astype(np.float64)
    p = predicted.astype(np.float64)
    rel = np.abs(p - m) / m
    return ErrorStats(
        len(m), float(np.median(rel)), float(np.mean(rel)), float(p.sum() / m.sum() - 1.0)
    )


def _class_group(op_class: npt.NDArray[Any]) -> npt.NDArray[np.int8]:
    """0 GEMM, 1 attention, 2 memory-bound."""
    return np.where(
        op_class == OpClass.GEMM, 0, np.where(op_class == OpClass.ATTENTION, 1, 2)
    ).astype(np.int8)


def free_params(data: FitData) -> tuple[str, ...]:
    """The parameters ``data`` can inform (classes with at least :data:`MIN_SHAPES` shapes)."""
    group = _class_group(data.op_class)
    free: list[str] = []
    for g, name in enumerate(("gemm", "attention", "memory")):
        if len(np.unique(data.shape[group == g])) >= MIN_SHAPES:
            free += PARAM_GROUPS[name]
    if len(np.unique(data.shape)) >= MIN_SHAPES:
        free += PARAM_GROUPS["min"]
    return tuple(p for p in FITTABLE if p in free)


def _shape_medians(data: FitData) -> FitData:
    """One row per distinct shape, with the median measured time of its ops."""
    order = np.lexsort((data.measured_ns, data.shape))
    shape = data.shape[order]
    starts = np.flatnonzero(np.r_[True, shape[1:] != shape[:-1]])
    counts = np.diff(np.r_[starts, len(shape)])
    lo = order[starts + (counts - 1) // 2]
    hi = order[starts + counts // 2]
    first = data.take(lo)
    med = (data.measured_ns[lo] + data.measured_ns[hi]) // 2
    return replace(first, measured_ns=med.astype(np.int64))


def _bounds(name: str) -> tuple[float, float]:
    return _BOUNDS["eff"] if name.endswith("_eff_max") else _BOUNDS[name]


def _to_z(name: str, value: float) -> float:
    lo, hi = _bounds(name)
    if name.endswith("_eff_max"):
        u = min(max((value - lo) / (hi - lo), 1e-4), 1 - 1e-4)
        return math.log(u / (1 - u))
    return math.log(min(max(value, lo), hi))


def _from_z(name: str, z: float) -> float:
    lo, hi = _bounds(name)
    if name.endswith("_eff_max"):
        return lo + (hi - lo) / (1.0 + math.exp(-min(max(z, -40.0), 40.0)))
    return min(max(math.exp(min(z, 60.0)), lo), hi)


def _with(base: ComputeParams, names: Sequence[str], z: F64) -> ComputeParams:
    values: dict[str, Any] = {n: _from_z(n, float(v)) for n, v in zip(names, z, strict=True)}
    if "kernel_min_ns" in values:
        values["kernel_min_ns"] = round(values["kernel_min_ns"])
    return replace(base, **values)


def _line_start(data: FitData, gpu: GpuSpec) -> dict[str, float]:
    """Starting values from a line through each roof: time = slope * work + intercept, fitted
    by least squares on relative error over the ops of that roof well above the shortest."""
    out: dict[str, float] = {}
    t = data.measured_ns.astype(np.float64) * 1e-9
    group = _class_group(data.op_class)
    floor = np.quantile(t, 0.25) if len(t) else 0.0
    for g, (eff, half) in enumerate(
        (PARAM_GROUPS["gemm"], PARAM_GROUPS["attention"], PARAM_GROUPS["memory"])
    ):
        m = (group == g) & (t > floor)
        if np.count_nonzero(m) < 2:
            continue
        rate = data.peak[m] if g < 2 else np.full(np.count_nonzero(m), gpu.hbm_bytes_per_s)
        work = data.flops[m] if g < 2 else data.nbytes[m]
        a = np.column_stack([work / rate, 1.0 / rate]) / t[m, None]
        coef, *_ = np.linalg.lstsq(a, np.ones(len(a)), rcond=None)
        inv_eff, half_over_eff = float(coef[0]), float(coef[1])
        if inv_eff > 0:
            out[eff] = 1.0 / inv_eff
            out[half] = max(half_over_eff / inv_eff, 0.0)
    if len(t):
        out["kernel_min_ns"] = float(np.quantile(t, 0.05)) * 1e9
    return out


@dataclass(frozen=True, slots=True)
class FitResult:
    """Fitted parameters, which of them were free, and the loss reached."""

    params: ComputeParams
    fitted: tuple[str, ...]
    loss: float


def fit_params(data: FitData, gpu: GpuSpec, base: ComputeParams) -> FitResult:
    """Fit the parameters ``data`` informs; the others keep ``base``'s values."""
    names = free_params(data)
    if not names or not len(data):
        return FitResult(base, (), float("nan"))
    shapes = _shape_medians(data)
    log_meas = np.log(shapes.measured_ns.astype(np.float64))
    start_base = np.array([_to_z(n, float(getattr(base, n))) for n in names])

    def loss(z: F64) -> float:
        pred = predict_ns(_with(base, names, z), shapes, gpu).astype(np.float64)
        r = np.abs(np.log(np.maximum(pred, 1.0)) - log_meas)
        data_loss = np.mean(np.where(r < _HUBER, 0.5 * r * r, _HUBER * (r - 0.5 * _HUBER)))
        return float(data_loss + _PRIOR * np.sum((z - start_base) ** 2))

    line = _line_start(shapes, gpu)
    start_line = np.array(
        [_to_z(n, line.get(n, float(getattr(base, n)))) for n in names], dtype=np.float64
    )
    best_z, best = start_base, loss(start_base)
    for z0 in (start_base, start_line):
        z, value = nelder_mead(loss, z0)
        z, value = nelder_mead(loss, z)  # a restart escapes a collapsed simplex
        if value < best:
            best_z, best = z, value
    return FitResult(_with(base, names, best_z), names, best)


def _shape_folds(data: FitData, keys: Sequence[str], folds: int) -> npt.NDArray[np.int64]:
    """A fold per row: shapes ordered by class and a stable hash of their key, dealt round
    robin, so that every fold gets shapes of every class."""
    ids = np.unique(data.shape)
    group = _class_group(data.op_class)
    cls_of = {int(s): int(g) for s, g in zip(data.shape, group, strict=True)}
    order = sorted(ids, key=lambda s: (cls_of[int(s)], zlib.crc32(keys[int(s)].encode())))
    fold_of = {int(s): i % folds for i, s in enumerate(order)}
    return np.array([fold_of[int(s)] for s in data.shape], dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Holdout:
    """Predictions of held-out ops by parameters fitted without them, and by the defaults."""

    split: str
    folds: int
    fitted: ErrorStats
    default: ErrorStats
    by_class: dict[str, tuple[ErrorStats, ErrorStats]]


def _class_name(group: int) -> str:
    return ("gemm", "attention", "memory")[group]


Split = list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]]


def holdout_splits(data: FitData, shape_keys: Sequence[str]) -> tuple[str, Split] | None:
    """``(kind, [(train rows, test rows), ...])``: by trace when the traces hold shapes the
    other traces lack — at least :data:`MIN_SHAPES` and a quarter of all shapes; each test
    keeps only those — else by shape folds (ranks of one job repeat each other's shapes);
    ``None`` with fewer than two shapes. No test row shares its shape with a training row of
    its split."""
    traces = np.unique(data.trace)
    n_shapes = len(np.unique(data.shape))
    tests: Split = []
    if len(traces) >= 2:
        for t in traces:
            train = data.trace != t
            seen = np.isin(data.shape, data.shape[train])
            tests.append((train, (data.trace == t) & ~seen))
        tested = len(np.unique(np.concatenate([data.shape[test] for _, test in tests])))
        if tested >= max(MIN_SHAPES, n_shapes / 4):
            return "trace", tests

    if n_shapes < 2:
        return None
    k = min(SHAPE_FOLDS, n_shapes)
    fold = _shape_folds(data, shape_keys, k)
    return "shape", [(fold != f, fold == f) for f in range(k)]


def holdout(
    data: FitData, gpu: GpuSpec, base: ComputeParams, shape_keys: Sequence[str]
) -> Holdout | None:
    """Held-out errors (see the module docstring); ``None`` with fewer than two shapes."""
    found = holdout_splits(data, shape_keys)
    if found is None:
        return None
    split, tests = found
    pred = np.zeros(len(data), dtype=np.int64)
    tested = np.zeros(len(data), dtype=bool)
    for train, test in tests:
        if not np.any(test):
            continue
        params = fit_params(data.take(np.flatnonzero(train)), gpu, base).params
        rows = np.flatnonzero(test)
        pred[rows] = predict_ns(params, data.take(rows), gpu)
        tested[rows] = True
    rows = np.flatnonzero(tested)
    held = data.take(rows)
    p_fit = pred[rows]
    p_def = predict_ns(base, held, gpu)
    group = _class_group(held.op_class)
    by_class = {
        _class_name(g): (
            error_stats(p_fit[group == g], held.measured_ns[group == g]),
            error_stats(p_def[group == g], held.measured_ns[group == g]),
        )
        for g in np.unique(group)
    }
    return Holdout(
        split,
        sum(1 for _, test in tests if np.any(test)),
        error_stats(p_fit, held.measured_ns),
        error_stats(p_def, held.measured_ns),
        by_class,
    )


@dataclass(frozen=True, slots=True)
class Calibration:
    """The kernel cost model fitted to one GPU's ops, with its errors."""

    gpu: str
    params: ComputeParams
    defaults: ComputeParams
    fitted: tuple[str, ...]
    traces: tuple[str, ...]
    ops: int
    shapes: int
    class_ops: dict[str, int]
    class_shapes: dict[str, int]
    #: Dtypes of the fitted GEMMs: one ``gemm_eff_max`` serves every dtype, so parameters
    #: fitted on TF32 products describe fp16/bf16 ones only as far as both behave alike.
    gemm_dtypes: tuple[str, ...]
    in_sample: ErrorStats
    default_in_sample: ErrorStats
    holdout: Holdout | None

    def fitted_values(self) -> dict[str, float | int]:
        """The fitted parameters by name."""
        return {
            f.name: getattr(self.params, f.name)
            for f in fields(self.params)
            if f.name in self.fitted
        }


def calibrate(samples: KernelSamples, gpu: GpuSpec, defaults: ComputeParams) -> Calibration:
    """Fit ``samples`` (all ops of one GPU) and measure in-sample and held-out errors."""
    data = fit_data(samples, gpu)
    result = fit_params(data, gpu, defaults)
    group = _class_group(data.op_class)
    present = [int(g) for g in np.unique(group)]
    return Calibration(
        gpu=gpu.name,
        params=result.params,
        defaults=defaults,
        fitted=result.fitted,
        traces=tuple(samples.sources[int(t)] for t in np.unique(data.trace)),
        ops=len(data),
        shapes=len(np.unique(data.shape)),
        class_ops={_class_name(g): int(np.count_nonzero(group == g)) for g in present},
        class_shapes={_class_name(g): len(np.unique(data.shape[group == g])) for g in present},
        gemm_dtypes=tuple(sorted({samples.dtypes[int(d)] for d in samples.dtype[group == 0]})),
        in_sample=error_stats(predict_ns(result.params, data, gpu), data.measured_ns),
        default_in_sample=error_stats(predict_ns(defaults, data, gpu), data.measured_ns),
        holdout=holdout(data, gpu, defaults, samples.shapes),
    )
