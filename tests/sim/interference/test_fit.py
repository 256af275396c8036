"""Interference models: fits that recover known factors, tuning that finds the generating
solo-time scale, the GPU-generation restriction, and the TOML round trip."""

from __future__ import annotations

import numpy as np
import pytest

from echo_view.model.workload import OP_CLASS_NAMES
from echo_view.sim.interference.evaluate import errors
from echo_view.sim.interference.fit import (
    CLASSES,
    SHRINKS,
    SOLO_SCALE_NS,
    InterferenceFit,
    KernelFeatures,
    feature_names,
    fit,
    solo_weight,
)
from echo_view.sim.interference.measured_rates import predict_durations
from tests.sim.interference.interference_data import FACTORS, synthetic


@pytest.mark.parametrize("kind", ["constant", "fitted"])
def test_fit_recovers_known_factors(kind: str) -> None:
    fitted = kind == "fitted"
    s = synthetic(FACTORS, excess=fitted)
    model = fit(s, kind, ridge=1e-9)
    if fitted:  # 1 - 1/s = g(solo) * (1 - 1/factor): at g = 1 the class factor itself
        feats = KernelFeatures.from_samples(s)
        sd = model.slowdown(feats)
        g = solo_weight(s.cols["solo_ns"])
        got = {}
        for name in FACTORS:
            sel = s.cols["op_class"] == OP_CLASS_NAMES.index(name)
            got[name] = float(np.median(1.0 / (1.0 - (1.0 - 1.0 / sd[sel]) / g[sel])))
        got["attention"] = model.class_factors()["attention"]
    else:
        got = model.class_factors()
    for name, f in FACTORS.items():
        assert got[name] == pytest.approx(f, rel=1e-3)
    # Classes without samples are not slowed.
    assert got["attention"] == pytest.approx(1.0, abs=1e-3)
    # Predicting the samples back through their communication intervals is exact (to 1 ns).
    pred = predict_durations(s, model.slowdown(KernelFeatures.from_samples(s)))
    assert np.abs(pred - s.cols["dur_ns"]).max() <= 1


def test_model_round_trip() -> None:
    model = fit(synthetic(FACTORS), "fitted")
    back = InterferenceFit.from_dict(model.as_dict())
    assert back.kind == "fitted" and np.allclose(back.coef, model.coef)
    assert back.names == feature_names("fitted")
    with pytest.raises(ValueError):
        InterferenceFit.from_dict({"kind": "constant", "coef": {"class.bogus": 1.0}})
    assert len(CLASSES) == len(OP_CLASS_NAMES) - 1
    assert back.generations == model.generations == (3,) and back.shrink == model.shrink
    with pytest.raises(ValueError):
        InterferenceFit.from_dict({"kind": "fitted", "form": "rate", "coef": {}})


def test_fitted_excess_shape_and_unseen_generation() -> None:
    s = synthetic(FACTORS, excess=True)
    model = fit(s, "fitted", tune_by="trace", ridge=1e-6)
    assert model.solo_scale_ns == 10_000  # the scale the data were made with
    assert model.shrink in SHRINKS and model.shrink > 0  # the data hold real slowdowns
    gemm = OP_CLASS_NAMES.index("gemm")
    f = KernelFeatures.of_classes([gemm] * 4, [2_000, 10_000, 100_000, 10_000_000], generation=3)
    sd = model.slowdown(f)
    # Long kernels are barely slowed.
    assert (np.diff(sd) < 0).all() and sd[-1] < 1.001 and sd[0] > 1.03
    # Hopper was never fitted: no slowdown claimed; unknown generation: the model applies.
    hopper = KernelFeatures.of_classes([gemm], [2_000], generation=5)
    assert model.slowdown(hopper).tolist() == [1.0]
    assert model.slowdown(KernelFeatures.of_classes([gemm], [2_000]))[0] > 1.0


@pytest.mark.parametrize("scale", [3_000, 30_000])
def test_tuning_finds_the_generating_scale(scale: int) -> None:
    """Data made with one of the grid's solo scales: cross-validation within them picks it,
    and keeps the excess (shrink 1) since the data are noise-free."""
    s = synthetic(FACTORS, per_class=60, excess=True, scale_ns=scale)
    model = fit(s, "fitted", tune_by="trace", ridge=1e-6)
    assert model.solo_scale_ns == scale and model.shrink == 1.0
    # Untuned, the default scale is kept and the fit is worse on the same data.
    plain = fit(s, "fitted", ridge=1e-6)
    assert plain.solo_scale_ns == SOLO_SCALE_NS != scale
    feats = KernelFeatures.from_samples(s)
    err = {
        name: errors(s.cols["dur_ns"], predict_durations(s, m.slowdown(feats))).weighted_abs
        for name, m in (("tuned", model), ("plain", plain))
    }
    assert err["tuned"] < err["plain"]


def test_unrestricted_generations_apply_everywhere() -> None:
    s = synthetic(FACTORS, excess=True)
    model = fit(s, "fitted", restrict_generations=False)
    assert model.generations == ()
    gemm = OP_CLASS_NAMES.index("gemm")
    hopper = KernelFeatures.of_classes([gemm], [2_000], generation=5)
    assert model.slowdown(hopper)[0] > 1.0
