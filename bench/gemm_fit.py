"""Fit the GEMM shape model (echo_view/sim/gemm_shape.py) to measured GEMM throughput.

Data: ``samples/kernels/gemm/`` (OpenXLA's measured matmul table for H100 ``sm_90`` and B200
``sm_100``, DeepGEMM's FP8 GEMMs on H800; see that folder's SOURCE.md). For each GPU and dtype
it fits ``eff``, ``k_half`` and ``fixed_ns`` on every shape (in-sample) and, for the held-out
error, on four of five folds of shapes predicting the fifth (one shape at a time for a table of
fewer than five); the baseline is the flops-only roofline of
``echo_view/sim/kernel_cost.py`` with the preset parameters the simulator used before the shape
model (a constant fraction of peak, saturating in FLOPs). Left out: products with fewer than 256
rows or columns (memory-bound: the model's math time does not describe them) and the H100 FP8
rows of the OpenXLA table (some exceed the dense FP8 peak, the rest reach 99.7% of it).

    python bench/gemm_fit.py [--markdown]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.model.gpus import PRESETS  # noqa: E402
from echo_view.sim.gemm_shape import GemmShapeParams, fit, gemm_times_ns  # noqa: E402
from echo_view.sim.kernel_cost import ComputeParams, op_times_ns  # noqa: E402

DATA = ROOT / "samples" / "kernels" / "gemm"
#: Table platform -> GPU preset; table dtype -> the peak it runs at (f32 products run on TF32
#: tensor cores: the table's f32 rates exceed the FP32 peak 6-fold).
GPUS = {"sm_90": "H100-SXM5-80GB", "sm_100_B200": "B200", "H800-SXM5-80GB": "H800-SXM5-80GB"}
#: (platform, dtype) rows not fitted, with the reason (shown in the table).
EXCLUDED = {("sm_90", "fp8_e4m3"): "rates at or above the dense FP8 peak"}
PEAK_KEY = {"bf16": "bf16", "f32": "tf32", "fp8_e4m3": "fp8"}
#: What the simulator used for Hopper GEMMs before the shape model (gemm_eff_max fitted on two
#: published step times), and the generic defaults for other GPUs.
BEFORE = {
    "H100-SXM5-80GB": ComputeParams(gemm_eff_max=0.55),
    "H800-SXM5-80GB": ComputeParams(gemm_eff_max=0.55),
    "B200": ComputeParams(),
}


def load(folder: Path = DATA) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray, int]]:
    """(GPU, dtype) -> (dims [n,4], seconds [n], rows left out)."""
    groups: dict[tuple[str, str], list[tuple[int, int, int, int, float]]] = {}
    dropped: dict[tuple[str, str], int] = {}
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if row["dtype"] not in PEAK_KEY:
                    continue
                key = (GPUS[row["platform"]], row["dtype"])
                b, m, n, k = (int(row[c]) for c in ("b", "m", "n", "k"))
                if (row["platform"], row["dtype"]) in EXCLUDED or min(m, n) < 256:
                    dropped[key] = dropped.get(key, 0) + 1
                    continue
                groups.setdefault(key, []).append((b, m, n, k, float(row["flops_per_s"])))
    out = {}
    for key in sorted(set(groups) | set(dropped)):
        arr = np.array(groups.get(key, []), dtype=np.float64).reshape(-1, 5)
        dims = arr[:, :4].astype(np.int64)
        out[key] = (dims, 2.0 * dims.prod(axis=1) / arr[:, 4], dropped.get(key, 0))
    return out


def _errors(pred_ns: np.ndarray, secs: np.ndarray) -> np.ndarray:
    return np.abs(pred_ns / (secs * 1e9) - 1.0)


def evaluate(folds: int = 5) -> list[dict[str, object]]:
    """One result row per (GPU, dtype): fitted parameters, in-sample and held-out errors."""
    rows = []
    for (gpu, dtype), (dims, secs, dropped) in sorted(load().items()):
        spec = PRESETS[gpu]
        peak = spec.peak_flops[PEAK_KEY[dtype]]
        row: dict[str, object] = {"gpu": gpu, "dtype": dtype, "n": len(secs), "dropped": dropped}
        if len(secs) < 4:
            rows.append(row)
            continue
        n_folds = min(folds, len(secs))  # a small table: leave one shape out at a time
        params, _ = fit(dims, secs, peak, spec.sm_count)
        ins = _errors(gemm_times_ns(dims, peak, spec.sm_count, params), secs)
        fold = np.random.default_rng(0).permutation(len(secs)) % n_folds
        held = np.empty(len(secs))
        for f in range(n_folds):
            tr, te = fold != f, fold == f
            p, _ = fit(dims[tr], secs[tr], peak, spec.sm_count)
            held[te] = _errors(gemm_times_ns(dims[te], peak, spec.sm_count, p), secs[te])
        flops = 2.0 * dims.prod(axis=1).astype(np.float64)
        base = BEFORE[gpu]
        before_ns = (
            op_times_ns(
                np.zeros(len(secs), dtype=np.uint8),
                flops,
                np.zeros(len(secs), dtype=np.int64),
                np.full(len(secs), peak),
                spec,
                base,
            )
            - base.kernel_gap_ns
        )
        big = flops >= 2.0**34  # >= 17 GFLOP: the GEMMs that dominate large-model steps
        row.update(
            params=params,
            ins_med=float(np.median(ins)),
            ins_mean=float(ins.mean()),
            held_med=float(np.median(held)),
            held_mean=float(held.mean()),
            held_big=float(np.median(held[big])) if big.any() else float("nan"),
            before_med=float(np.median(_errors(before_ns, secs))),
            before_big=float(np.median(_errors(before_ns[big], secs[big]))),
            best_eff=float((flops / secs).max() / peak),
        )
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, object]]) -> str:
    head = (
        "| GPU | dtype | shapes (dropped) | eff | k_half | fixed (µs) | best measured / peak |"
        " in-sample median / mean | held out median / mean | held out, >= 17 GFLOP |"
        " flops-only preset, median (>= 17 GFLOP) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        p = r.get("params")
        if not isinstance(p, GemmShapeParams):
            lines.append(f"| {r['gpu']} | {r['dtype']} | {r['n']} ({r['dropped']}) | not fitted |")
            continue
        lines.append(
            f"| {r['gpu']} | {r['dtype']} | {r['n']} ({r['dropped']}) | {p.eff:.3f} | "
            f"{p.k_half:.0f} | {p.fixed_ns / 1e3:.2f} | {r['best_eff']:.1%} | "
            f"{r['ins_med']:.1%} / {r['ins_mean']:.1%} | {r['held_med']:.1%} / "
            f"{r['held_mean']:.1%} | {r['held_big']:.1%} | {r['before_med']:.1%} "
            f"({r['before_big']:.1%}) |"
        )
    return head + "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the docs/accuracy.md table")
    args = ap.parse_args()
    rows = evaluate()
    if args.markdown:
        print(markdown(rows))
        return 0
    for r in rows:
        p = r.get("params")
        print(
            r["gpu"],
            r["dtype"],
            r["n"],
            r["dropped"],
            p,
            {k: v for k, v in r.items() if k.endswith(("med", "mean", "big"))},
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
