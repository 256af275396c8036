"""Fitting the simulator's free parameters on published step times, and leave-one-source-out
cross-validation of that fit.

A *run* is one published measurement (a workload config with a ``[reference]``); its *group*
is the unit a parameter is fitted per (the GPU generation), its *source* the publication it
comes from. Each fitted parameter has a search range and is fitted, per group, by minimising
the mean absolute relative error over the group's training runs: a coarse grid over the range,
then a fine grid around the best coarse value, one parameter after the other (coordinate
descent, repeated until no value changes). A group without training runs keeps the
parameter's default, and the fit says so. A group whose parameters come from kernel
measurements (``measured``) is not fitted at all: it keeps its defaults in every fold.

Cross-validation by source fits on every source but one and predicts the one left out, so a
run's held-out error never depends on its own measurement nor on any other run of its source.
The predictor (a simulation) is the costly part. It runs only at the points of each
parameter's coarse grid (memoised per run and values, so folds share them); the fine search
interpolates between the two neighbouring coarse points, linearly in ``1/value`` for
efficiencies (a GEMM's time is proportional to it) or in the value itself. The predictions
reported at the fitted values are simulated exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FittedParam:
    """One fitted parameter and where to look for it: ``low``..``high`` in ``coarse`` steps,
    then ``fine`` steps within one coarse step of the best coarse value."""

    name: str
    low: float
    high: float
    coarse: float
    fine: float
    #: The prediction is about linear in ``1/value`` (an efficiency), else in the value.
    inverse: bool = True

    def coarse_grid(self) -> list[float]:
        return _grid(self.low, self.high, self.coarse)

    def fine_grid(self, around: float) -> list[float]:
        lo = max(self.low, around - self.coarse)
        hi = min(self.high, around + self.coarse)
        return _grid(lo, hi, self.fine)


#: The parameters fitted on published step times: the fraction of the dense peak that large
#: GEMMs reach, per GPU generation (see docs/accuracy.md).
FITTED: tuple[FittedParam, ...] = (FittedParam("gemm_eff_max", 0.30, 0.95, 0.05, 0.01),)


def _grid(low: float, high: float, step: float) -> list[float]:
    n = round((high - low) / step)
    return [round(low + i * step, 6) for i in range(n + 1)]


@dataclass(frozen=True)
class Run:
    """One published measurement."""

    name: str
    source: str
    group: str
    measured_s: float


#: Predicted seconds of a run with some parameters overridden (``{}``: all at their defaults).
Predictor = Callable[[Run, Mapping[str, float]], float]


@dataclass(frozen=True)
class GroupFit:
    """The parameters fitted for one group, and on what."""

    group: str
    values: Mapping[str, float]
    sources: tuple[str, ...]
    runs: int
    #: Parameters left at their default because the group had no training run.
    defaulted: tuple[str, ...] = ()
    train_mae_pct: float | None = None
    #: Parameters left at their default because no value changes these runs' predictions
    #: (the cost model does not use them for this GPU).
    no_effect: tuple[str, ...] = ()
    #: Where the group's parameters come from instead of a fit (``None``: they are fitted).
    measured: str | None = None


@dataclass(frozen=True)
class Fold:
    """The fit made without ``left_out`` (``None``: the fit on every source)."""

    left_out: str | None
    fits: Mapping[str, GroupFit]


@dataclass
class CrossValidation:
    """In-sample (fitted on all sources) and held-out predictions of every run."""

    runs: list[Run]
    in_sample: dict[str, float]
    held_out: dict[str, float]
    all_sources: Fold
    folds: list[Fold] = field(default_factory=list)
    #: Predictions with every parameter at its default (nothing fitted).
    defaults: dict[str, float] = field(default_factory=dict)


def error_pct(predicted: float, measured: float) -> float:
    """Signed relative error, in percent of the measurement."""
    return 100.0 * (predicted / measured - 1.0)


class _Memo:
    """A predictor whose answers are kept per run and parameter values."""

    def __init__(self, predict: Predictor) -> None:
        self.predict = predict
        self.cache: dict[tuple[str, tuple[tuple[str, float], ...]], float] = {}

    def __call__(self, run: Run, values: Mapping[str, float]) -> float:
        key = (run.name, tuple(sorted(values.items())))
        if key not in self.cache:
            self.cache[key] = self.predict(run, dict(values))
        return self.cache[key]


class _Interpolated:
    """Predictions between the coarse grid points of each parameter, from those points."""

    def __init__(self, exact: Predictor, params: Sequence[FittedParam]) -> None:
        self.exact = exact
        self.params = params
        self.grids = {p.name: p.coarse_grid() for p in params}

    def __call__(self, run: Run, values: Mapping[str, float]) -> float:
        for p in self.params:
            v = values.get(p.name)
            grid = self.grids[p.name]
            if v is None or v in grid or not grid[0] < v < grid[-1]:
                continue
            hi = next(i for i, g in enumerate(grid) if g > v)
            a, b = grid[hi - 1], grid[hi]
            ya = self(run, {**values, p.name: a})
            yb = self(run, {**values, p.name: b})
            x, xa, xb = (1 / v, 1 / a, 1 / b) if p.inverse else (v, a, b)
            return ya + (yb - ya) * (x - xa) / (xb - xa)
        return self.exact(run, values)


def _mae(runs: Sequence[Run], predict: Predictor, values: Mapping[str, float]) -> float:
    return sum(abs(error_pct(predict(r, values), r.measured_s)) for r in runs) / len(runs)


def fit_group(
    group: str,
    runs: Sequence[Run],
    predict: Predictor,
    params: Sequence[FittedParam] = FITTED,
    max_passes: int = 3,
) -> GroupFit:
    """Fit ``params`` on ``runs`` (all of one group) by minimising the mean |error|."""
    if not runs:
        return GroupFit(group, {}, (), 0, tuple(p.name for p in params))
    values: dict[str, float] = {}
    inert: set[str] = set()
    for _ in range(max_passes):
        changed = False
        for p in params:
            if p.name in inert:
                continue
            best = _best(p.coarse_grid(), p.name, values, runs, predict)
            if best is None:
                inert.add(p.name)
                continue
            best = _best(p.fine_grid(best), p.name, values, runs, predict)
            if best is not None and values.get(p.name) != best:
                values[p.name] = best
                changed = True
        if not changed:
            break
    sources = tuple(sorted({r.source for r in runs}))
    no_effect = tuple(p.name for p in params if p.name in inert)
    mae = _mae(runs, predict, values)
    return GroupFit(group, values, sources, len(runs), (), mae, no_effect)


def _best(
    grid: Iterable[float],
    name: str,
    values: Mapping[str, float],
    runs: Sequence[Run],
    predict: Predictor,
) -> float | None:
    """The grid value with the least mean |error| (the lower one on a tie); ``None`` when
    every value gives the same error (the parameter does not act on these runs)."""
    scored = [(_mae(runs, predict, {**values, name: v}), v) for v in grid]
    if max(scored)[0] - min(scored)[0] <= 1e-9 * max(1.0, min(scored)[0]):
        return None
    return min(scored)[1]


def fit_all(
    runs: Sequence[Run],
    predict: Predictor,
    groups: Iterable[str],
    params: Sequence[FittedParam] = FITTED,
    measured: Mapping[str, str] | None = None,
) -> dict[str, GroupFit]:
    """One :class:`GroupFit` per group in ``groups`` from the runs of that group; the groups in
    ``measured`` (group -> where its parameters come from) keep their defaults."""
    fits = {}
    for g in groups:
        mine = [r for r in runs if r.group == g]
        if measured and g in measured:
            sources = tuple(sorted({r.source for r in mine}))
            mae = _mae(mine, predict, {}) if mine else None
            fits[g] = GroupFit(g, {}, sources, len(mine), (), mae, (), measured[g])
        else:
            fits[g] = fit_group(g, mine, predict, params)
    return fits


def cross_validate(
    runs: Sequence[Run],
    predict: Predictor,
    params: Sequence[FittedParam] = FITTED,
    measured: Mapping[str, str] | None = None,
) -> CrossValidation:
    """Fit on all sources (in-sample) and leave each source out in turn (held out); the groups
    in ``measured`` are not fitted (see :func:`fit_all`)."""
    memo = _Memo(predict)
    fitting = _Interpolated(memo, params)
    groups = sorted({r.group for r in runs})
    everything = Fold(None, fit_all(runs, fitting, groups, params, measured))
    in_sample = {r.name: memo(r, everything.fits[r.group].values) for r in runs}
    result = CrossValidation(list(runs), in_sample, {}, everything)
    result.defaults = {r.name: memo(r, {}) for r in runs}
    for source in sorted({r.source for r in runs}):
        train = [r for r in runs if r.source != source]
        test = [r for r in runs if r.source == source]
        test_groups = sorted({r.group for r in test})
        fold = Fold(source, fit_all(train, fitting, test_groups, params, measured))
        result.folds.append(fold)
        for r in test:
            result.held_out[r.name] = memo(r, fold.fits[r.group].values)
    return result


@dataclass(frozen=True)
class Aggregate:
    """Mean |error| and mean signed error (bias) of a set of runs, in percent."""

    key: str
    runs: int
    in_sample_mae: float
    in_sample_bias: float
    held_out_mae: float
    held_out_bias: float
    default_mae: float
    default_bias: float


def aggregate(cv: CrossValidation, key: Callable[[Run], str]) -> list[Aggregate]:
    """:class:`Aggregate` per value of ``key`` (e.g. per source or per GPU), then ``all``."""
    keys = sorted({key(r) for r in cv.runs})
    out = [_aggregate(k, [r for r in cv.runs if key(r) == k], cv) for k in keys]
    out.append(_aggregate("all", cv.runs, cv))
    return out


def _aggregate(name: str, runs: Sequence[Run], cv: CrossValidation) -> Aggregate:
    stats: list[float] = []
    for predictions in (cv.in_sample, cv.held_out, cv.defaults):
        errors = [error_pct(predictions[r.name], r.measured_s) for r in runs]
        stats += [sum(map(abs, errors)) / len(runs), sum(errors) / len(runs)]
    return Aggregate(name, len(runs), *stats)
