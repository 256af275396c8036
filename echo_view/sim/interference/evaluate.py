"""Held-out evaluation of the interference models: each fold of a split is predicted by models
fitted on the other folds only, and the predicted durations of the overlapped kernels are
compared with the measured ones. A sample's duration is predicted by running its solo work
from its measured start through its device's measured communication
(:func:`~echo_view.sim.interference.measured_rates.predict_durations`); ``none`` predicts the solo
time (no interference)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.workload import OP_CLASS_NAMES
from echo_view.sim.interference.fit import CLASSES, InterferenceFit, KernelFeatures, fit, folds
from echo_view.sim.interference.measure import OverlapSamples
from echo_view.sim.interference.measured_rates import predict_durations

I64 = npt.NDArray[np.int64]

#: The models every evaluation compares.
MODELS: tuple[str, ...] = ("none", "constant", "fitted")


@dataclass(frozen=True, slots=True)
class Errors:
    """Duration errors of one model on a set of samples (fractions, not percent)."""

    samples: int
    weighted_abs: float
    mean_abs: float
    median_abs: float
    total: float
    within_10: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "samples": self.samples,
            "weighted_abs": self.weighted_abs,
            "mean_abs": self.mean_abs,
            "median_abs": self.median_abs,
            "total": self.total,
            "within_10": self.within_10,
        }


def errors(measured: I64, predicted: I64) -> Errors:
    """The absolute error summed over kernels relative to their summed duration
    (``weighted_abs``: long kernels count in proportion to their time, as in a step time),
    the per-kernel absolute relative error (mean, median, share within 10%) and the error of
    the summed duration (``total``)."""
    m = np.maximum(np.asarray(measured, dtype=np.float64), 1.0)
    p = np.asarray(predicted, dtype=np.float64)
    rel = np.abs(p - m) / m
    if not len(m):
        nan = float("nan")
        return Errors(0, nan, nan, nan, nan, nan)
    return Errors(
        samples=len(m),
        weighted_abs=float(np.abs(p - m).sum() / m.sum()),
        mean_abs=float(rel.mean()),
        median_abs=float(np.median(rel)),
        total=float((p.sum() - m.sum()) / m.sum()),
        within_10=float((rel <= 0.10).mean()),
    )


def holdout(
    samples: OverlapSamples,
    by: str = "job",
    *,
    fitted: list[InterferenceFit] | None = None,
    **fit_args: Any,
) -> tuple[dict[str, Errors], dict[str, I64]]:
    """Errors of every model in :data:`MODELS` over the held-out folds of split ``by``: each
    fold is predicted by models fitted on the other folds only. Also returns the predicted
    durations (per model, aligned with ``samples``; -1 for samples in no fold). ``fitted``,
    when given, receives each fold's fitted model (with its tuned scale and shrink)."""
    preds = {m: np.full(len(samples), -1, dtype=np.int64) for m in MODELS}
    tested = np.zeros(len(samples), dtype=bool)
    for test in folds(samples, by):
        train = ~test
        if by == "step":
            train &= samples.cols["step"] >= 0
        if not train.any() or not test.any():
            continue
        held = samples.select(test)
        feats = KernelFeatures.from_samples(held)
        preds["none"][test] = held.cols["solo_ns"]
        for kind in ("constant", "fitted"):
            args = dict(fit_args)
            if kind == "fitted":
                args.setdefault("tune_by", by)
            else:
                args.pop("restrict_generations", None)
            model = fit(samples.select(train), kind, **args)
            if kind == "fitted" and fitted is not None:
                fitted.append(model)
            preds[kind][test] = predict_durations(held, model.slowdown(feats))
        tested |= test
    measured = samples.cols["dur_ns"]
    errs = {m: errors(measured[tested], preds[m][tested]) for m in MODELS}
    return errs, preds


def per_class_errors(
    samples: OverlapSamples, preds: Mapping[str, I64], classes: Sequence[str] = CLASSES
) -> dict[str, dict[str, Errors]]:
    """:func:`errors` per kernel class for each model's held-out predictions."""
    out: dict[str, dict[str, Errors]] = {}
    measured = samples.cols["dur_ns"]
    for name in classes:
        sel = (samples.cols["op_class"] == OP_CLASS_NAMES.index(name)) & (preds["none"] >= 0)
        if sel.any():
            out[name] = {m: errors(measured[sel], p[sel]) for m, p in preds.items()}
    return out


__all__ = ["MODELS", "Errors", "errors", "holdout", "per_class_errors"]
