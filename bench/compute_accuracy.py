"""Kernel cost model fitted to real Kineto kernels: per GPU, the fitted parameters, in-sample
and held-out errors, the defaults' error on the same held-out ops, and what the fitted file
does to the step time of the validation configs of that GPU.

    python bench/compute_accuracy.py [--markdown] [-o compute.toml]

Runs ``echo-view calibrate compute`` on the traces below (those of ``samples/`` and
``../shared/data`` whose ops recorded shapes and whose GPU has a preset), then
``echo-view simulate CONFIG --compute FILE`` on ``samples/configs/validation``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.cli import main as cli  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
TRACES = [
    ROOT / "samples/dlrm_kineto",
    SHARED / "hta-tests/trace_diff/test/test.json.gz",
    SHARED / "hta-tests/trace_diff/control/control.json.gz",
    SHARED / "hta-tests/negative_queue_length_values_check/rank0.json.gz",
    SHARED / "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    SHARED / "tracelens/b200/eager_trace.json.gz",
]
PARAMS = ("gemm_eff_max", "gemm_half_flops", "mem_eff_max", "mem_half_bytes", "kernel_min_ns")


def run(argv: list[str]) -> dict[str, Any]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli(argv)
    if code != 0:
        raise SystemExit(f"echo-view {' '.join(argv)} failed with {code}")
    out: dict[str, Any] = json.loads(buf.getvalue())
    return out


def pct(e: dict[str, Any] | None, key: str) -> str:
    return "-" if e is None or e[key] is None else f"{100 * e[key]:.1f}%"


def num(v: float | int) -> str:
    return str(v) if isinstance(v, int) else f"{v:.3g}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args()
    traces = [p for p in TRACES if p.exists()]
    out = args.output or Path(tempfile.mkdtemp()) / "compute.toml"
    t0 = time.perf_counter()
    report = run(["calibrate", "compute", *map(str, traces), "-o", str(out), "--json"])
    t_fit = time.perf_counter() - t0
    gpus = report["gpus"]
    lines = [
        "| GPU (GEMM dtypes) | traces | ops (shapes: gemm / attn / memory) | split "
        "| in-sample median / mean | held out median / mean "
        "| defaults, held out median / mean | GEMMs held out: fitted / defaults (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, g in gpus.items():
        h = g["holdout"]
        cs = g["class_shapes"]
        shapes = " / ".join(str(cs.get(k, 0)) for k in ("gemm", "attention", "memory"))
        gemm = h["by_class"].get("gemm") if h else None
        lines.append(
            f"| {name} ({', '.join(g['gemm_dtypes'])}) | {len(g['traces'])} "
            f"| {g['ops']} ({shapes}) "
            f"| {h['split'] if h else '-'} ({h['fitted']['ops'] if h else 0} ops) "
            f"| {pct(g['in_sample'], 'median_abs')} / {pct(g['in_sample'], 'mean_abs')} "
            f"| {pct(h and h['fitted'], 'median_abs')} / {pct(h and h['fitted'], 'mean_abs')} "
            f"| {pct(h and h['default'], 'median_abs')} / {pct(h and h['default'], 'mean_abs')} "
            f"| {pct(gemm and gemm['fitted'], 'median_abs')} / "
            f"{pct(gemm and gemm['default'], 'median_abs')} |"
        )
    lines += ["", "| GPU | " + " | ".join(PARAMS) + " |", "|---|" + "---|" * len(PARAMS)]
    for name, g in gpus.items():
        cells = []
        for k in PARAMS:
            v, d = g["params"].get(k), g["defaults"].get(k)
            cells.append("-" if v is None else f"{num(v)} ({num(d)})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    # Step time of the validation configs whose GPU the file covers.
    doc = tomllib.loads(out.read_text(encoding="utf-8"))
    rows = []
    for cfg in sorted((ROOT / "samples/configs/validation").glob("*.toml")):
        gpu = tomllib.loads(cfg.read_text(encoding="utf-8"))["cluster"]["gpu"]
        covered = [k for k in doc["gpu"] if k.split("-")[0] == gpu.split("-")[0]]
        if not covered:
            continue
        base = run(["simulate", str(cfg), "--json"])
        fitted = run(["simulate", str(cfg), "--json", "--compute", str(out)])
        rows.append(
            f"| {cfg.stem} | {gpu} | {base['reference_error_pct']:+.1f}% "
            f"| {fitted['reference_error_pct']:+.1f}% |"
        )
    if rows:
        lines += [
            "",
            "| run | GPU | step error, defaults | step error, --compute file |",
            "|---|---|---|---|",
            *rows,
        ]
    if report["skipped"]:
        lines += ["", "Skipped (no GPU preset): " + ", ".join(report["skipped"])]
    text = "\n".join(lines)
    print(text if args.markdown else text.replace("|", " "))
    print(f"\ncalibration wall time {t_fit:.1f} s; file {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
