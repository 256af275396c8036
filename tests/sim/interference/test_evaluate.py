"""Held-out evaluation of the interference models: splits that never test on what they
fitted, the error definitions, and the real samples' held-out errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from echo_view.sim.interference.evaluate import errors, holdout
from echo_view.sim.interference.fit import folds
from tests.conftest import SAMPLES
from tests.sim.interference.interference_data import FACTORS, synthetic


def test_holdout_never_tests_what_it_fitted() -> None:
    s = synthetic(FACTORS)
    for by in ("job", "trace", "step"):
        masks = folds(s, by)
        total = np.sum(masks, axis=0)
        assert total.max() == 1  # each sample is tested once
        if by == "step":
            assert [set(s.cols["step"][m].tolist()) for m in masks] == [{0}, {1}]
        else:
            assert [set(s.cols["trace"][m].tolist()) for m in masks] == [{0}, {1}]
    models: list[Any] = []
    errs, preds = holdout(s, "job", fitted=models)
    assert len(models) == 2 and all(m.kind == "fitted" for m in models)  # one per fold
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


def test_real_samples_step_holdout() -> None:
    """The samples' jobs, split by step: every model is evaluated on the same kernels."""
    from echo_view.loading import build_registry
    from echo_view.sim.compute import classify_kernel
    from echo_view.sim.interference.measure import OverlapSamples, measure

    reg = build_registry()
    jobs = [
        (str(p), reg.importer_for(p).read([p]))
        for p in (SAMPLES / "hta_nccl" / "nccl_data.json.gz", SAMPLES / "hta_sampled_128")
    ]
    s = OverlapSamples.concat([measure(job, classify_kernel, name) for name, job in jobs])
    errs, preds = holdout(s, "step")
    n = {m: e.samples for m, e in errs.items()}
    assert len(set(n.values())) == 1 and n["none"] > 100
    for m in ("constant", "fitted"):
        assert np.isfinite(errs[m].weighted_abs)
        assert (preds[m][preds["none"] >= 0] > 0).all()
