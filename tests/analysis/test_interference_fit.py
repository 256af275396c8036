"""Interference models: rate arithmetic by hand, fits that recover known factors, held-out
splits that never test on what they fitted, and the real samples' held-out errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from echo_view.analysis.interference import OverlapSamples
from echo_view.analysis.interference_fit import (
    CLASSES,
    SHRINKS,
    InterferenceFit,
    KernelFeatures,
    errors,
    feature_names,
    finish_times,
    fit,
    folds,
    holdout,
    predict_durations,
    solo_weight,
)
from echo_view.model.kinds import CollectiveKind
from echo_view.model.workload import OP_CLASS_NAMES
from tests.conftest import SAMPLES


def test_finish_times_by_hand() -> None:
    us, ue = np.array([20_000, 200_000]), np.array([60_000, 210_000])
    ends = finish_times(
        [0, 0, 30_000, 70_000, 0, 190_000],
        [100_000, 10_000, 100_000, 100_000, 25_000, 30_000],
        [2 / 3, 2 / 3, 2 / 3, 2 / 3, 0.5, 0.5],
        us,
        ue,
    )
    # 0: 20 alone + 40 at 2/3 (26.667) + 53.333 alone -> 113.333 µs.
    # 1: done before the comm starts. 2: starts inside: 30 slowed = 20 of work, 80 left -> 140.
    # 3: starts after the first comm: 100 alone until 170. 4: 20 alone + 10 at 1/2 = 5 -> 30.
    # 5: 10 alone to 200, 10 slowed (= 5 of work), 15 alone -> 225.
    assert ends.tolist() == [113_333, 10_000, 140_000, 170_000, 30_000, 225_000]


def _synthetic(
    factors: dict[str, float], per_class: int = 40, seed: int = 1, excess: bool = False
) -> OverlapSamples:
    """Kernels generated from the rate model with a known slowdown per class (``excess``: the
    fitted model's form, ``1 - 1/s = g(solo) * (1 - 1/factor)``), two traces, two steps each,
    various overlap fractions (no noise)."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[Any]] = {k: [] for k in (
        "trace", "rank", "device", "row", "step", "op_class", "start_ns", "dur_ns", "solo_ns",
        "solo_count", "overlap_ns", "grid_blocks", "block_threads", "sm_count", "comm_kind",
        "comm_protocol", "comm_channels", "generation", "blocks_per_sm", "occupancy",
        "solo_spread")}  # fmt: skip
    comm = {}
    t = 0
    for trace in (0, 1):
        starts, ends = [], []
        for cls_name, s in factors.items():
            for k in range(per_class):
                solo = int(rng.integers(5_000, 500_000))
                if excess:
                    s = 1.0 / (1.0 - float(solo_weight(solo)) * (1.0 - 1.0 / factors[cls_name]))
                alone = int(solo * rng.uniform(0.0, 0.8))  # work done before the comm starts
                over = round((solo - alone) * s)  # the rest runs fully overlapped
                starts.append(t + alone)
                ends.append(t + alone + over + 1_000_000)
                vals = dict(
                    trace=trace, rank=trace, device=0, row=k, step=k % 2,
                    op_class=OP_CLASS_NAMES.index(cls_name), start_ns=t, dur_ns=alone + over,
                    solo_ns=solo, solo_count=5, overlap_ns=over, grid_blocks=-1,
                    block_threads=-1, sm_count=108, comm_kind=int(CollectiveKind.ALL_REDUCE),
                    comm_protocol=0, comm_channels=-1, generation=3, blocks_per_sm=np.nan,
                    occupancy=np.nan, solo_spread=0.0,
                )  # fmt: skip
                for key, v in vals.items():
                    rows[key].append(v)
                t += alone + over + 2_000_000
        comm[(trace, 0)] = (np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))
    cols = {
        k: np.array(v, dtype=np.float64 if k in ("blocks_per_sm", "occupancy", "solo_spread")
                    else np.int64)
        for k, v in rows.items()
    }  # fmt: skip
    return OverlapSamples(cols, ("a#rank0", "b#rank1"), comm)


FACTORS = {"gemm": 1.3, "elementwise": 1.1, "reduction": 1.6, "copy": 1.05}


@pytest.mark.parametrize("kind", ["constant", "fitted"])
def test_fit_recovers_known_factors(kind: str) -> None:
    fitted = kind == "fitted"
    s = _synthetic(FACTORS, excess=fitted)
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


def test_holdout_never_tests_what_it_fitted() -> None:
    s = _synthetic(FACTORS)
    for by in ("job", "trace", "step"):
        masks = folds(s, by)
        total = np.sum(masks, axis=0)
        assert total.max() == 1  # each sample is tested once
        if by == "step":
            assert [set(s.cols["step"][m].tolist()) for m in masks] == [{0}, {1}]
        else:
            assert [set(s.cols["trace"][m].tolist()) for m in masks] == [{0}, {1}]
    errs, preds = holdout(s, "job")
    # No noise: the constant model predicts the held-out trace exactly (the data have its
    # form); "none" is the solo time.
    assert errs["constant"].weighted_abs < 1e-4
    assert errs["fitted"].weighted_abs < errs["none"].weighted_abs
    assert errs["none"].total < -0.05
    assert (preds["none"] == s.cols["solo_ns"]).all()


def test_errors_definitions() -> None:
    e = errors(np.array([100, 200]), np.array([110, 150]))
    assert e.weighted_abs == pytest.approx(60 / 300)
    assert e.mean_abs == pytest.approx((0.1 + 0.25) / 2)
    assert e.total == pytest.approx(-40 / 300)
    assert e.within_10 == pytest.approx(0.5)


def test_model_round_trip() -> None:
    model = fit(_synthetic(FACTORS), "fitted")
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
    s = _synthetic(FACTORS, excess=True)
    model = fit(s, "fitted", shrink_by="trace")
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


def test_real_samples_step_holdout() -> None:
    """The samples' jobs, split by step: every model is evaluated on the same kernels."""
    from echo_view.analysis.interference import samples_from_jobs
    from echo_view.cli import build_registry
    from echo_view.sim.compute import classify_kernel

    reg = build_registry()
    jobs = [
        (str(p), reg.importer_for(p).read([p]))
        for p in (SAMPLES / "hta_nccl" / "nccl_data.json.gz", SAMPLES / "hta_sampled_128")
    ]
    s = samples_from_jobs(jobs, classify_kernel)
    errs, preds = holdout(s, "step")
    n = {m: e.samples for m, e in errs.items()}
    assert len(set(n.values())) == 1 and n["none"] > 100
    for m in ("constant", "fitted"):
        assert np.isfinite(errs[m].weighted_abs)
        assert (preds[m][preds["none"] >= 0] > 0).all()
