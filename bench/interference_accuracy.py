"""Held-out accuracy of the interference models on every real trace with overlapping NCCL
kernels: the table of docs/accuracy.md ("Interference").

    python bench/interference_accuracy.py [--splits step,trace,job] [--markdown]

For each split, every fold is predicted by models fitted on the other folds only; the fitted
model's solo-time scale and shrink are tuned by cross-validation inside those training folds
(``fit(..., tune_by=split)``), so no choice sees the fold it is scored on. Each split is run
twice: with the fitted model restricted to the GPU generations it was fitted on (the product's
behaviour) and without that restriction. The tuned (scale, shrink) of every fold is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.cli.interference import load_samples  # noqa: E402
from echo_view.loading import build_registry  # noqa: E402
from echo_view.sim.interference.evaluate import MODELS, holdout, per_class_errors  # noqa: E402
from echo_view.sim.interference.fit import InterferenceFit  # noqa: E402
from echo_view.sim.interference.measure import OverlapSamples  # noqa: E402

I64 = npt.NDArray[np.int64]
SHARED = ROOT.parent / "shared" / "data"
#: Every job with NCCL kernels, each once (the samples stand for their shared copies).
INPUTS = (
    ROOT / "samples/dlrm_kineto",
    ROOT / "samples/hta_nccl/nccl_data.json.gz",
    ROOT / "samples/hta_sampled_128",
    SHARED / "hta-tests/negative_queue_length_values_check/rank0.json.gz",
    SHARED / "hta-tests/trace_diff/test/test.json.gz",
    SHARED / "hta-tests/trace_diff/control/control.json.gz",
    SHARED / "tracelens/mi300/resnet_act_checkpoint.json.gz",
    SHARED / "hta-tests/df_index_resolver/df_index_resolver.json.gz",
    SHARED / "nsys-ai-fixtures/mfu_2gpu_before.sqlite.gz",
    SHARED / "nsys-ai-fixtures/mfu_2gpu_after.sqlite.gz",
    SHARED / "tracelens/b200/eager_trace.json.gz",
)


def _bootstrap_margin(
    samples: OverlapSamples, preds: dict[str, I64], baseline: str, draws: int = 2000
) -> tuple[float, float]:
    """5th and 95th percentile of (baseline - fitted) weighted |err| when the jobs are
    resampled with replacement: how much the margin depends on which jobs were measured."""
    job_of = [src.split("#")[0] for src in samples.sources]
    names = sorted(set(job_of))
    job = np.array([names.index(j) for j in job_of])[samples.cols["trace"]]
    tested = preds["none"] >= 0
    measured = samples.cols["dur_ns"].astype(np.float64)
    k = len(names)
    m_sum = np.bincount(job[tested], measured[tested], minlength=k)
    e_sum = {
        name: np.bincount(job[tested], np.abs(preds[name][tested] - measured[tested]), minlength=k)
        for name in (baseline, "fitted")
    }
    rng = np.random.default_rng(0)
    pick = rng.integers(0, k, size=(draws, k))
    counts = np.stack([np.bincount(row, minlength=k) for row in pick])
    total = counts @ m_sum
    margin = (counts @ e_sum[baseline] - counts @ e_sum["fitted"]) / np.maximum(total, 1.0)
    lo, hi = np.percentile(margin, [5, 95])
    return float(lo), float(hi)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", default="step,trace,job")
    ap.add_argument("--markdown", action="store_true", help="print the docs table rows")
    args = ap.parse_args()
    paths = [p for p in INPUTS if p.exists()]
    if len(paths) < len(INPUTS):
        print(f"note: {len(INPUTS) - len(paths)} inputs missing (../shared absent?)")
    samples = load_samples(paths, build_registry())
    print(f"{len(samples)} overlapped kernels from {len(samples.sources)} traces")
    rows = []
    for split in args.splits.split(","):
        for restrict in (True, False):
            label = f"{split}, " + ("seen generations only" if restrict else "all generations")
            models: list[InterferenceFit] = []
            errs, preds = holdout(samples, split, fitted=models, restrict_generations=restrict)
            chosen = [f"{m.solo_scale_ns / 1000:g}us/{m.shrink:g}" for m in models]
            print(f"\n{label}: {len(chosen)} folds; tuned scale/shrink per fold: {chosen}")
            for name in MODELS:
                e = errs[name]
                print(
                    f"  {name:9s} n={e.samples:5d} weighted {e.weighted_abs:6.1%} "
                    f"median {e.median_abs:6.1%} total {e.total:+6.1%} "
                    f"within10 {e.within_10:5.1%}"
                )
                rows.append((label, name, e))
            best = min(("none", "constant"), key=lambda n: errs[n].weighted_abs)
            margin = errs[best].weighted_abs - errs["fitted"].weighted_abs
            if restrict:
                for cls, by_model in per_class_errors(samples, preds).items():
                    parts = [
                        f"{m} {e.weighted_abs:.1%} / {e.total:+.1%}" for m, e in by_model.items()
                    ]
                    print(f"    {cls:13s} n={by_model['none'].samples:5d} " + ", ".join(parts))
            lo, hi = _bootstrap_margin(samples, preds, best)
            print(
                f"  fitted vs best baseline ({best}): {margin * 100:+.1f} points weighted "
                f"(90% interval over resampled jobs {lo * 100:+.1f} to {hi * 100:+.1f})"
            )
    if args.markdown:
        print("\n| split | model | weighted |err| | median |err| | total | within 10% |")
        print("|---|---|---|---|---|---|")
        last = ""
        for label, name, e in rows:
            first = label if label != last else ""
            last = label
            print(
                f"| {first} | {name} | {e.weighted_abs:.1%} | {e.median_abs:.1%} | "
                f"{e.total:+.1%} | {e.within_10:.1%} |"
            )
    return 0 if np.isfinite([r[2].weighted_abs for r in rows]).all() else 1


if __name__ == "__main__":
    raise SystemExit(main())
