"""Leave-one-source-out fitting on a fake predictor whose best parameter is known by hand."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from echo_view.sim.calibrate.steps import (
    FittedParam,
    Run,
    aggregate,
    cross_validate,
    error_pct,
    fit_group,
)

EFF = FittedParam("gemm_eff_max", 0.30, 0.95, 0.05, 0.01)
DEFAULT_EFF = 0.80

# Each run does `work` seconds at 100% efficiency; its measurement was taken at efficiency
# `true`, so predicting with efficiency e gives work / e and the error is true / e - 1.
WORK = {"a1": 2.0, "a2": 3.0, "b1": 5.0, "c1": 7.0}
TRUE = {"a1": 0.50, "a2": 0.50, "b1": 0.60, "c1": 0.70}
RUNS = [
    Run("a1", "srcA", "ampere", WORK["a1"] / TRUE["a1"]),
    Run("a2", "srcA", "ampere", WORK["a2"] / TRUE["a2"]),
    Run("b1", "srcB", "ampere", WORK["b1"] / TRUE["b1"]),
    Run("c1", "srcC", "hopper", WORK["c1"] / TRUE["c1"]),
]


class FakeSimulator:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, run: Run, values: Mapping[str, float]) -> float:
        self.calls += 1
        return WORK[run.name] / values.get("gemm_eff_max", DEFAULT_EFF)


def test_fit_minimises_mean_absolute_error() -> None:
    # Two runs at 0.5 and one at 0.6: for e in [0.5, 0.6] the summed |error| is
    # 2 (1 - 0.5/e) + (0.6/e - 1) = 1 - 0.4/e, smallest at e = 0.5.
    fit = fit_group("ampere", RUNS[:3], FakeSimulator(), [EFF])
    assert fit.values == {"gemm_eff_max": 0.5}
    assert fit.sources == ("srcA", "srcB") and fit.runs == 3 and fit.defaulted == ()
    assert fit.train_mae_pct == pytest.approx((0.6 / 0.5 - 1) * 100 / 3)


def test_leave_one_source_out_by_hand() -> None:
    sim = FakeSimulator()
    cv = cross_validate(RUNS, sim, [EFF])
    assert cv.all_sources.fits["ampere"].values == {"gemm_eff_max": 0.5}
    assert cv.all_sources.fits["hopper"].values == {"gemm_eff_max": 0.7}
    folds = {f.left_out: f for f in cv.folds}
    assert set(folds) == {"srcA", "srcB", "srcC"}
    # srcA left out: fitted on b1 alone (0.6), so a1 and a2 come out 0.5/0.6 - 1 = -16.7%.
    assert folds["srcA"].fits["ampere"].values == {"gemm_eff_max": 0.6}
    assert folds["srcA"].fits["ampere"].sources == ("srcB",)
    for name in ("a1", "a2"):
        assert error_pct(cv.held_out[name], WORK[name] / 0.5) == pytest.approx(-100 / 6)
        assert error_pct(cv.in_sample[name], WORK[name] / 0.5) == pytest.approx(0.0)
    # srcB left out: fitted on srcA (0.5): b1 is predicted 0.6/0.5 - 1 = +20%.
    assert error_pct(cv.held_out["b1"], RUNS[2].measured_s) == pytest.approx(20.0)
    # srcC is the only Hopper source: without it there is nothing to fit, the default stays.
    hopper = folds["srcC"].fits["hopper"]
    assert hopper.values == {} and hopper.defaulted == ("gemm_eff_max",) and hopper.runs == 0
    assert error_pct(cv.held_out["c1"], RUNS[3].measured_s) == pytest.approx(-12.5)
    assert error_pct(cv.in_sample["c1"], RUNS[3].measured_s) == pytest.approx(0.0)
    # A fold only fits the groups of the runs it predicts.
    assert set(folds["srcC"].fits) == {"hopper"}
    # Simulated only on the coarse grid (the fine search interpolates, exactly here since the
    # fake is linear in 1/e) and at the fitted values, each (run, value) once.
    assert sim.calls <= len(RUNS) * (len(EFF.coarse_grid()) + 2)


def test_aggregates_per_source() -> None:
    cv = cross_validate(RUNS, FakeSimulator(), [EFF])
    rows = {a.key: a for a in aggregate(cv, lambda r: r.source)}
    assert rows["srcA"].runs == 2
    assert rows["srcA"].held_out_mae == pytest.approx(100 / 6)
    assert rows["srcA"].held_out_bias == pytest.approx(-100 / 6)
    assert rows["srcB"].held_out_bias == pytest.approx(20.0)
    assert rows["srcA"].in_sample_mae == pytest.approx(0.0)
    everything = rows["all"]
    assert everything.runs == 4
    assert everything.held_out_mae == pytest.approx((2 * 100 / 6 + 20 + 12.5) / 4)
    assert everything.held_out_bias == pytest.approx((-2 * 100 / 6 + 20 - 12.5) / 4)
    # In sample only b1 is off (fitted 0.5 where it ran at 0.6).
    assert everything.in_sample_mae == pytest.approx(20 / 4)
    # With the default 0.8 every run is predicted true / 0.8 - 1.
    signed = [100 * (TRUE[r.name] / DEFAULT_EFF - 1) for r in RUNS]
    assert everything.default_bias == pytest.approx(sum(signed) / 4)
    assert everything.default_mae == pytest.approx(sum(map(abs, signed)) / 4)


def test_two_parameters_by_coordinate_descent() -> None:
    """A fixed per-step cost and an efficiency, both recovered from three runs."""
    cost = FittedParam("step_cost", 0.0, 2.0, 0.5, 0.1, inverse=False)
    work = {"x": 1.0, "y": 4.0, "z": 10.0}
    runs = [Run(n, "s", "g", w / 0.6 + 0.3) for n, w in work.items()]

    def predict(run: Run, values: Mapping[str, float]) -> float:
        return work[run.name] / values.get("gemm_eff_max", 0.8) + values.get("step_cost", 0.0)

    fit = fit_group("g", runs, predict, [EFF, cost])
    assert fit.values == {"gemm_eff_max": pytest.approx(0.6), "step_cost": pytest.approx(0.3)}
    assert fit.train_mae_pct == pytest.approx(0.0, abs=1e-9)


def test_fine_values_interpolate_between_coarse_simulations() -> None:
    """The fit simulates only coarse grid points; the fitted value itself is simulated."""
    coarse_only = FittedParam("gemm_eff_max", 0.5, 1.0, 0.5, 0.25)
    asked: list[float] = []

    def predict(run: Run, values: Mapping[str, float]) -> float:
        e = values.get("gemm_eff_max", DEFAULT_EFF)
        asked.append(e)
        return e**2  # not linear in 1/e

    # Measured 0.75^2. Interpolated in 1/e between 0.5 (0.25) and 1.0 (1.0), e = 0.75 gives
    # 0.25 + 0.75 * (1/0.75 - 2) / (1 - 2) = 0.75 (+33%), better than 0.5 (-56%) and 1.0 (+78%).
    cv = cross_validate([Run("q", "s", "g", 0.5625)], predict, [coarse_only])
    assert cv.all_sources.fits["g"].values == {"gemm_eff_max": 0.75}
    assert cv.all_sources.fits["g"].train_mae_pct == pytest.approx(100 / 3)
    assert cv.in_sample["q"] == pytest.approx(0.5625)  # reported: simulated exactly
    # 0.8: the held-out prediction, with the default (no other source to fit on).
    assert sorted(set(asked)) == [0.5, 0.75, DEFAULT_EFF, 1.0] and asked.count(0.75) == 1


def test_a_parameter_without_effect_keeps_its_default() -> None:
    """A GPU whose cost model ignores the parameter: reported, not fitted to the range's end."""
    runs = [Run("h", "s", "hopper", 2.0)]
    fit = fit_group("hopper", runs, lambda run, values: 1.5, [EFF])
    assert fit.values == {} and fit.no_effect == ("gemm_eff_max",)
    assert fit.train_mae_pct == pytest.approx(25.0)


def test_a_measured_group_is_never_fitted() -> None:
    """A generation whose GEMM rate is a kernel measurement keeps its defaults in every fold, and
    its runs are never simulated away from them."""
    sim = FakeSimulator()
    asked: list[float] = []

    def spy(run: Run, values: Mapping[str, float]) -> float:
        if run.group == "hopper":
            asked.append(values.get("gemm_eff_max", DEFAULT_EFF))
        return sim(run, values)

    cv = cross_validate(RUNS, spy, [EFF], measured={"hopper": "kernel table"})
    fit = cv.all_sources.fits["hopper"]
    assert fit.values == {} and fit.measured == "kernel table" and fit.sources == ("srcC",)
    # c1 ran at 0.70, predicted at the default 0.80: 0.7 / 0.8 - 1 = -12.5%.
    assert fit.train_mae_pct == pytest.approx(12.5)
    held = {f.left_out: f for f in cv.folds}["srcC"].fits["hopper"]
    assert held.measured == "kernel table" and held.runs == 0 and held.train_mae_pct is None
    assert cv.in_sample["c1"] == cv.held_out["c1"] == cv.defaults["c1"] == pytest.approx(7 / 0.8)
    assert set(asked) == {DEFAULT_EFF}
    # The other group is fitted as before.
    assert cv.all_sources.fits["ampere"].values == {"gemm_eff_max": 0.5}


def test_grids_stay_in_range() -> None:
    assert EFF.coarse_grid()[0] == 0.30 and EFF.coarse_grid()[-1] == 0.95
    fine = EFF.fine_grid(0.95)
    assert fine[0] == 0.90 and fine[-1] == 0.95 and len(fine) == 6
