"""Predicted vs measured step time for every workload config in a folder (default:
samples/configs/validation, copies of ../shared/validation/runs), optionally sweeping one
compute parameter.

    python bench/step_accuracy.py [RUNS_DIR] [--sweep NAME=V1,V2,...] [--markdown]

Traced graphs come from the ``.graph.json.gz`` beside each config when it matches, else they
are traced once (meta device, needs torch).
"""

from __future__ import annotations

import argparse
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.analysis.interference_features import gpu_generation  # noqa: E402
from echo_view.loading import graph_for_config  # noqa: E402
from echo_view.model.config import parse_workload_config  # noqa: E402
from echo_view.sim.cluster import cluster_from_config  # noqa: E402
from echo_view.sim.comm.defaults import default_comm_model  # noqa: E402
from echo_view.sim.compute_presets import compute_params_for  # noqa: E402
from echo_view.sim.config_sim import simulate_config  # noqa: E402
from echo_view.sim.interference import model_from_setting  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="?", default=str(ROOT / "samples/configs/validation"))
    ap.add_argument("--sweep", default="")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument(
        "--interference", default="on", help="on (as `echo-view simulate`), off, or a TOML file"
    )
    args = ap.parse_args()
    files = sorted(Path(args.runs).glob("*.toml"))
    items = []
    for f in files:
        cfg = parse_workload_config(tomllib.loads(f.read_text()), str(f))
        graph, _origin = graph_for_config(cfg, f)  # the shipped graph beside it, else traced
        items.append((f, cfg, graph, cluster_from_config(cfg.cluster)))
    sweep: list[tuple[str, float | None]] = [("", None)]
    if args.sweep:
        name, values = args.sweep.split("=")
        sweep = [(name, float(v)) for v in values.split(",")]
    for name, value in sweep:
        rows = []
        for f, cfg, graph, cluster in items:
            params = compute_params_for(cluster.gpu)
            if name:
                params = params.with_overrides({name: value})
            t0 = time.perf_counter()
            model = model_from_setting(args.interference, gpu_generation(cluster.gpu.name))
            sim = simulate_config(
                graph, cfg, cluster, default_comm_model(), params, interference=model
            )
            wall = time.perf_counter() - t0
            pred = sim.step_ns / 1e9
            ref = cfg.reference.step_time_s if cfg.reference else float("nan")
            rows.append((f.stem, cfg, pred, ref, 100 * (pred / ref - 1), wall))
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


if __name__ == "__main__":
    raise SystemExit(main())
