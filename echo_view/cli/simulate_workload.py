"""``echo-view simulate CONFIG.toml|GRAPH.json``: predict one training step of a workload
config from its traced graph (see :mod:`echo_view.cli.workload` for where graphs come from).

``--set`` keys here: ``cluster.<key>`` (the cluster model's override keys),
``compute.<parameter>`` (a kernel cost parameter, e.g. ``compute.gemm_eff_max=0.7``),
``compute.scale.<class>`` (multiply the compute time of an op class, or ``all``),
``comm.scale`` (multiply every collective's time), ``interference`` (``on``, the default:
published slowdowns of compute beside communication for the GPU; ``off``; or a model file
from ``echo-view calibrate interference``).

``--json`` prints (stable keys, only ever added): ``step_time_s`` (slowest simulated rank),
``ranks_total``, ``ranks_simulated``, ``ranks_mode``, ``stages`` (per pipeline stage:
``{stage, step_time_s}``), ``breakdown`` (slowest rank: ``compute_s``, ``comm_s``,
``exposed_comm_s``, ``idle_s``), ``bubble`` (``ideal`` and ``simulated`` fractions),
``throughput`` (``tokens_per_step``, ``tokens_per_s_per_gpu``, ``model_flops_per_token``,
``peak_flops_per_gpu`` for the config's dtype, ``mfu``: :mod:`echo_view.sim.throughput`),
``reference`` (``step_time_s``, ``source``) and ``reference_error_pct`` when the config has a
``[reference]``, ``graph`` (``origin``, ``roles``, ``ops``), ``cluster``, ``overrides``,
``seconds`` (``graph``, ``simulate``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from echo_view.analysis.interference_features import gpu_generation
from echo_view.analysis.summary import summarize
from echo_view.cli.workload import load_workload
from echo_view.errors import ConfigError
from echo_view.formats import Registry
from echo_view.model.job import ClockAlignment, Job
from echo_view.model.workload import OP_CLASS_NAMES
from echo_view.sim.cluster import OVERRIDE_KEYS, cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.compute_presets import compute_params_for, compute_params_from_toml
from echo_view.sim.config_sim import predicted_config_job, simulate_config
from echo_view.sim.interference import model_from_setting
from echo_view.sim.kernel_cost import ComputeParams
from echo_view.sim.throughput import throughput

_PARAM_KEYS = tuple(f"compute.{f}" for f in ComputeParams.__dataclass_fields__)
_SCALE_KEYS = tuple(f"compute.scale.{c}" for c in (*OP_CLASS_NAMES[:-1], "all"))
KNOWN_KEYS = (
    *(f"cluster.{k}" for k in OVERRIDE_KEYS), *_PARAM_KEYS, *_SCALE_KEYS, "comm.scale",
    "interference",
)  # fmt: skip


def scale_value(key: str, value: str) -> float:
    """A ``--set`` scale factor: a finite number >= 0 (used for measured jobs too)."""
    try:
        x = float(value)
    except ValueError:
        raise ConfigError(f"expected a number, got {value!r}", where=key) from None
    if not math.isfinite(x) or x < 0:
        raise ConfigError(f"must be a finite number >= 0, got {value!r}", where=key)
    return x


def run_workload(args: argparse.Namespace, registry: Registry, overrides: dict[str, str]) -> int:
    """Simulate a config or traced graph; print the report, write ``-o`` if given."""
    for key in overrides:
        if key not in KNOWN_KEYS:
            raise ConfigError(
                f"unknown --set key {key!r} for a workload config",
                hint=f"known keys: {', '.join(KNOWN_KEYS)}",
            )
    exporter = registry.exporter_for(args.output) if args.output is not None else None
    ranks_mode = getattr(args, "ranks", "stages") or "stages"
    cfg, graph, origin, t_graph = load_workload(args.input)
    cluster = cluster_from_config(cfg.cluster, cfg.source).with_overrides(
        {k.removeprefix("cluster."): v for k, v in overrides.items() if k.startswith("cluster.")}
    )
    params = compute_params_for(cluster.gpu)
    if getattr(args, "compute", None) is not None:
        params = compute_params_from_toml(args.compute, cluster.gpu, params)
    params = params.with_overrides(
        {k.removeprefix("compute."): v for k, v in overrides.items() if k in _PARAM_KEYS}
    )
    scales: dict[int, float] = {}
    every = scale_value("compute.scale.all", overrides.get("compute.scale.all", "1"))
    for i, name in enumerate(OP_CLASS_NAMES[:-1]):
        key = f"compute.scale.{name}"
        scales[i] = every * (scale_value(key, overrides[key]) if key in overrides else 1.0)
    comm_scale = scale_value("comm.scale", overrides.get("comm.scale", "1"))
    t0 = time.perf_counter()
    sim = simulate_config(
        graph,
        cfg,
        cluster,
        default_comm_model(),
        params,
        comm_scale=comm_scale,
        ranks=ranks_mode,
        scales=scales,
        interference=model_from_setting(
            overrides.get("interference", "on"), gpu_generation(cluster.gpu.name)
        ),
    )
    # The breakdown is reported for the slowest simulated rank; the whole predicted job is
    # expanded only when it is written out.
    ends = sim.rank_end_ns()
    slowest = max(ends, key=lambda r: (ends[r], -r))
    job = predicted_config_job(sim) if exporter is not None else None
    one = predicted_config_job(sim, ranks=[slowest]) if job is None else None
    t_sim = time.perf_counter() - t0
    report = _report(
        sim,
        one if one is not None else job,
        origin,
        cluster.describe(),
        overrides,
        ranks_mode,
        slowest,
    )
    report["throughput"] = throughput(cfg, sim.step_ns / 1e9, cluster.gpu.peak(cfg.dtype)).to_json()
    report["seconds"] = {"graph": round(t_graph, 3), "simulate": round(t_sim, 3)}
    if exporter is not None and job is not None:
        exporter.write(job, args.output)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(_render(report))
    return 0


def _report(
    sim: Any, job: Any, origin: str, cluster: Any, overrides: Any, mode: str, slowest: int
) -> dict[str, Any]:
    cfg = sim.cfg
    step_s = sim.step_ns / 1e9
    trace = job.trace(slowest)
    one = Job((trace,), ClockAlignment("simulated", (0,), 0), job.world_size, job.source, True)
    rows = summarize(one).to_json()["ranks"]
    slow = max(rows, key=lambda r: r["step_ns"] or 0) if rows else None
    breakdown = None
    if slow is not None and slow["compute_ns"] is not None:
        breakdown = {
            "rank": slow["rank"],
            "compute_s": slow["compute_ns"] / 1e9,
            "comm_s": slow["comm_ns"] / 1e9,
            "exposed_comm_s": slow["exposed_comm_ns"] / 1e9,
            "idle_s": slow["idle_ns"] / 1e9,
        }
    out: dict[str, Any] = {
        "input": str(cfg.source),
        "step_time_s": step_s,
        "ranks_total": cfg.parallel.world_size,
        "ranks_simulated": len(sim.composed.simulated_ranks),
        "ranks_mode": mode,
        "stages": [{"stage": s, "step_time_s": t / 1e9} for s, t in sorted(sim.stage_ns().items())],
        "breakdown": breakdown,
        "bubble": sim.bubble(),
        "graph": {"origin": origin, "roles": len(sim.graph.roles), "ops": sim.graph.op_count()},
        "cluster": cluster,
        "overrides": overrides,
    }
    if cfg.reference is not None:
        ref = cfg.reference.step_time_s
        out["reference"] = {"step_time_s": ref, "source": cfg.reference.source}
        out["reference_error_pct"] = 100.0 * (step_s - ref) / ref
    return out


def _render(r: dict[str, Any]) -> str:
    lines = [
        f"predicted step time  {r['step_time_s']:.4f} s  "
        f"({r['ranks_simulated']} of {r['ranks_total']} ranks simulated, mode {r['ranks_mode']})",
    ]
    if "reference" in r:
        lines.append(
            f"measured (reference) {r['reference']['step_time_s']:.4f} s  "
            f"error {r['reference_error_pct']:+.1f}%  [{r['reference']['source']}]"
        )
    b = r["breakdown"]
    if b:
        lines.append(
            f"slowest rank {b['rank']}: compute {b['compute_s']:.4f} s, comm {b['comm_s']:.4f} s "
            f"(exposed {b['exposed_comm_s']:.4f} s), idle {b['idle_s']:.4f} s"
        )
    lines.append(
        f"pipeline bubble: ideal {100 * r['bubble']['ideal']:.1f}%, "
        f"simulated {100 * r['bubble']['simulated']:.1f}%"
    )
    t = r["throughput"]
    lines.append(
        f"throughput: {t['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, "
        f"MFU {100 * t['mfu']:.1f}% ({t['model_flops_per_token'] / 1e9:,.1f} GFLOP/token, "
        f"peak {t['peak_flops_per_gpu'] / 1e12:,.1f} TFLOP/s per GPU)"
    )
    stages = ", ".join(f"{s['stage']}: {s['step_time_s']:.3f}" for s in r["stages"])
    lines.append(f"per stage (s): {stages}")
    lines.append(
        f"graph: {r['graph']['roles']} roles, {r['graph']['ops']} ops ({r['graph']['origin']})"
    )
    return "\n".join(lines) + "\n"
