"""Predicted vs measured step time for every workload config in a folder (default:
samples/configs/validation), optionally sweeping one compute parameter, or cross-validating
the fitted parameters by source.

    python bench/step_accuracy.py [RUNS_DIR] [--sweep NAME=V1,V2,...] [--markdown]
    python bench/step_accuracy.py [RUNS_DIR] --cv source [--pending DIR]

``--cv source`` fits every parameter of ``echo_view.sim.calibrate.steps.FITTED`` per GPU generation
(except the generations of ``echo_view.sim.compute_presets.GEMM_FROM_KERNELS``, whose GEMM rates
are kernel measurements and stay at their presets)
on all sources (``[reference] source_id``) and on all sources but one, and prints, as
markdown, in-sample, leave-one-source-out and shipped-preset errors side by side, per run, per
GPU and per source, and the fitted values with what they were fitted on. Configs in ``--pending``
(default samples/configs/validation-pending) are listed with the reason they are not run.

Traced graphs come from the ``.graph.json.gz`` beside each config when it matches, else they
are traced once (meta device, needs torch).
"""

from __future__ import annotations

import argparse
import sys
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.errors import EchoViewError  # noqa: E402
from echo_view.loading import graph_for_config  # noqa: E402
from echo_view.model.config import WorkloadConfig  # noqa: E402
from echo_view.model.config_parse import parse_workload_config  # noqa: E402
from echo_view.model.gpus import gpu_generation  # noqa: E402
from echo_view.model.graph import TracedGraph  # noqa: E402
from echo_view.sim.calibrate.steps import (  # noqa: E402
    FITTED,
    CrossValidation,
    Run,
    aggregate,
    cross_validate,
    error_pct,
)
from echo_view.sim.cluster import Cluster, cluster_from_config  # noqa: E402
from echo_view.sim.comm.defaults import default_comm_model  # noqa: E402
from echo_view.sim.compute_presets import GEMM_FROM_KERNELS, compute_params_for  # noqa: E402
from echo_view.sim.config_sim import simulate_config  # noqa: E402
from echo_view.sim.interference import model_from_setting  # noqa: E402


@dataclass(frozen=True)
class Item:
    path: Path
    cfg: WorkloadConfig
    graph: TracedGraph
    cluster: Cluster


def load(path: Path) -> Item:
    cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
    graph, _origin = graph_for_config(cfg, path)  # the shipped graph beside it, else traced
    return Item(path, cfg, graph, cluster_from_config(cfg.cluster))


def predict(item: Item, overrides: Mapping[str, float], interference: str) -> float:
    """Simulated step time in seconds with some compute parameters replaced."""
    params = compute_params_for(item.cluster.gpu).with_overrides(overrides)
    model = model_from_setting(interference, gpu_generation(item.cluster.gpu.name))
    sim = simulate_config(
        item.graph, item.cfg, item.cluster, default_comm_model(), params, interference=model
    )
    return sim.step_ns / 1e9


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="?", default=str(ROOT / "samples/configs/validation"))
    ap.add_argument("--sweep", default="")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument(
        "--interference", default="on", help="on (as `echo-view simulate`), off, or a TOML file"
    )
    ap.add_argument("--cv", choices=["source"], help="cross-validate the fitted parameters")
    ap.add_argument("--pending", default=str(ROOT / "samples/configs/validation-pending"))
    args = ap.parse_args()
    items = [load(f) for f in sorted(Path(args.runs).glob("*.toml"))]
    if args.cv:
        report_cv(items, Path(args.pending), args.interference)
        return 0
    sweep: list[tuple[str, float]] = [("", 0.0)]
    if args.sweep:
        name, values = args.sweep.split("=")
        sweep = [(name, float(v)) for v in values.split(",")]
    for name, value in sweep:
        rows = []
        for item in items:
            t0 = time.perf_counter()
            pred = predict(item, {name: value} if name else {}, args.interference)
            wall = time.perf_counter() - t0
            ref = item.cfg.reference.step_time_s if item.cfg.reference else float("nan")
            rows.append((item.path.stem, item.cfg, pred, ref, 100 * (pred / ref - 1), wall))
        label = f"{name}={value}" if name else "defaults"
        kor = [abs(r[4]) for r in rows if r[0].startswith("korthikanti")]
        ci = [abs(r[4]) for r in rows if r[0].startswith("megatron-ci")]
        if args.markdown:
            print("| run | GPUs | predicted (s) | measured (s) | error |")
            print("|---|---|---|---|---|")
            for stem, cfg, pred, ref, err, _ in rows:
                print(f"| {stem} | {cfg.cluster.gpus} | {pred:.3f} | {ref:.3f} | {err:+.1f}% |")
        else:
            for stem, cfg, pred, ref, err, wall in rows:
                print(
                    f"{stem:34s} {cfg.cluster.gpus:5d} GPUs pred {pred:9.3f} s  ref {ref:8.3f} s"
                    f"  err {err:+6.1f}%  ({wall:.1f} s)"
                )
        if kor:
            print(
                f"{label}: Korthikanti mean |err| {sum(kor) / len(kor):.2f}% (max {max(kor):.2f}%)",
                end="",
            )
        if ci:
            print(f"; Megatron-CI mean |err| {sum(ci) / len(ci):.2f}% (max {max(ci):.2f}%)", end="")
        print()
    return 0


def report_cv(items: list[Item], pending: Path, interference: str) -> None:
    """Leave-one-source-out cross-validation of the fitted parameters, as markdown."""
    by_name = {i.path.stem: i for i in items}
    runs = []
    for item in items:
        ref = item.cfg.reference
        if ref is None:
            continue
        runs.append(
            Run(item.path.stem, ref.source_id or ref.source, item.cluster.gpu.arch, ref.step_time_s)
        )
    t0 = time.perf_counter()
    cv = cross_validate(
        runs,
        lambda r, v: predict(by_name[r.name], v, interference),
        measured=GEMM_FROM_KERNELS,
    )
    wall = time.perf_counter() - t0
    gpu = {r.name: by_name[r.name].cluster.gpu.name for r in runs}
    print(f"{len(runs)} runs, {len({r.source for r in runs})} sources ({wall:.0f} s)\n")
    _print_runs(cv, by_name)
    for title, key in (("GPU", lambda r: gpu[r.name]), ("source", lambda r: r.source)):
        print(
            f"\n| {title} | runs | in-sample MAE | in-sample bias | LOSO MAE | LOSO bias "
            "| presets MAE | presets bias |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for a in aggregate(cv, key):
            print(
                f"| {a.key} | {a.runs} | {a.in_sample_mae:.1f}% | {a.in_sample_bias:+.1f}% "
                f"| {a.held_out_mae:.1f}% | {a.held_out_bias:+.1f}% "
                f"| {a.default_mae:.1f}% | {a.default_bias:+.1f}% |"
            )
    _print_fits(cv)
    _print_pending(pending)


def _print_runs(cv: CrossValidation, by_name: Mapping[str, Item]) -> None:
    print(
        "| run | source | GPU | GPUs | measured (s) | in-sample (s) | error "
        "| held out (s) | error | presets (s) | error |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in cv.runs:
        item = by_name[r.name]
        cells = [
            f"{p:.3f} | {error_pct(p, r.measured_s):+.1f}%"
            for p in (cv.in_sample[r.name], cv.held_out[r.name], cv.defaults[r.name])
        ]
        print(
            f"| {r.name} | {r.source} | {item.cluster.gpu.name} | {item.cfg.cluster.gpus} "
            f"| {r.measured_s:.3f} | {' | '.join(cells)} |"
        )


def _print_fits(cv: CrossValidation) -> None:
    ranges = ", ".join(f"{p.name} in [{p.low}, {p.high}]" for p in FITTED)
    print(f"\nFitted parameters ({ranges}), per GPU generation:\n")
    print("| fit | generation | values | fitted on (sources, runs) | training MAE |")
    print("|---|---|---|---|---:|")
    for fold in [cv.all_sources, *cv.folds]:
        label = "all sources" if fold.left_out is None else f"without {fold.left_out}"
        for g, fit in sorted(fold.fits.items()):
            if fit.measured is not None:
                mae = f"{fit.train_mae_pct:.1f}%" if fit.train_mae_pct is not None else "-"
                where = f"{', '.join(fit.sources)} ({fit.runs})" if fit.runs else "no run"
                print(f"| {label} | {g} | not fitted: {fit.measured} | {where} | {mae} |")
                continue
            if fit.defaulted:
                print(f"| {label} | {g} | default ({', '.join(fit.defaulted)}) | no run | - |")
                continue
            values = ", ".join(
                [f"{k} = {v:.2f}" for k, v in fit.values.items()]
                + [f"{k}: no effect, default kept" for k in fit.no_effect]
            )
            mae = f"{fit.train_mae_pct:.1f}%" if fit.train_mae_pct is not None else "-"
            print(f"| {label} | {g} | {values} | {', '.join(fit.sources)} ({fit.runs}) | {mae} |")


def _print_pending(pending: Path) -> None:
    files = sorted(pending.glob("*.toml")) if pending.is_dir() else []
    if not files:
        return
    print("\nNot run (pending):\n")
    for f in files:
        try:
            parse_workload_config(tomllib.loads(f.read_text()), str(f))
            why = "parses; needs its traced graph and a move to the validation folder"
        except (EchoViewError, tomllib.TOMLDecodeError) as exc:
            why = str(exc).replace(str(f) + ": ", "")
        print(f"- {f.name}: {why}")


if __name__ == "__main__":
    raise SystemExit(main())
