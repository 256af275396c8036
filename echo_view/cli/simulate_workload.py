"""``echo-view simulate CONFIG.toml|GRAPH.json``: predict one training step of a workload
config from its traced graph (see :mod:`echo_view.loading` for where graphs come from).

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
``memory`` (:mod:`echo_view.sim.memory`: ``peak_bytes``, ``peak_stage``, ``needed_bytes`` with
the allocator margin and reserved memory, ``gpu_bytes``, ``fits``, ``oom``,
``allocator_margin``, ``reserved_bytes``, ``sharding``, and per stage ``{stage, weights, grads,
optimizer, activations, inflight_microbatches, transient, peak_bytes}``),
``reference`` (``step_time_s``, ``source``) and ``reference_error_pct`` when the config has a
``[reference]``, ``graph`` (``origin``, ``roles``, ``ops``), ``cluster``, ``overrides``,
``seconds`` (``graph``, ``simulate``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from echo_view.cli.export import report_written
from echo_view.cli.numargs import check_timeout
from echo_view.cli.simulate import TIMEOUT_FOR_SCRIPTS
from echo_view.errors import UsageError
from echo_view.formats import Registry, check_output, json_text
from echo_view.loading import beside_graph, cache_dir, load_config, load_workload, setting_file
from echo_view.model.config_settings import with_parallel_settings
from echo_view.model.schema import json_schema
from echo_view.model.toml_file import read_toml_doc
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.runs import check_keys, predict_workload
from echo_view.text import cut_middle, printable

GB = 1e9


def run_workload(args: argparse.Namespace, registry: Registry, overrides: dict[str, str]) -> int:
    """Simulate a config or traced graph; print the report, write ``-o`` if given."""
    check_keys(overrides, workload=True)  # before tracing, which is slow
    exporter = None
    if args.output is not None:
        exporter = registry.exporter_for(args.output)
        if args.input.suffix.lower() == ".toml":  # the graphs a config may be read with
            check_output(args.output, [beside_graph(args.input), cache_dir()])
    timeout = getattr(args, "timeout", None)
    check_timeout(timeout)
    scripted = False
    if args.input.suffix.lower() == ".toml":
        # The cluster's values are checked before a graph is looked up or traced (minutes).
        early = load_config(args.input)
        cluster_from_config(early.cluster, early.source)
        with_parallel_settings(early, overrides)
        scripted = early.model.script is not None
    if timeout is not None and not scripted:  # (accepted, it did nothing)
        raise UsageError(TIMEOUT_FOR_SCRIPTS)
    cfg, graph, origin, t_graph = load_workload(args.input, timeout)
    compute = getattr(args, "compute", None)
    t0 = time.perf_counter()
    run = predict_workload(
        cfg,
        graph,
        overrides,
        origin=origin,
        compute=None if compute is None else read_toml_doc(compute),
        interference_file=setting_file(overrides.get("interference")),
        ranks=getattr(args, "ranks", "stages") or "stages",
        all_ranks_job=exporter is not None,
    )
    t_sim = time.perf_counter() - t0
    report = {
        "input": str(cfg.source),
        **run.report,
        "seconds": {"graph": round(t_graph, 3), "simulate": round(t_sim, 3)},
    }
    if exporter is not None:
        exporter.write(run.job, args.output)
        report_written(exporter, run.job, args.output)
    if args.json:
        sys.stdout.write(json_text({"schema": json_schema("simulate-config"), **report}))
    else:
        sys.stdout.write(_render(report))
    return 0


def _render(r: dict[str, Any]) -> str:
    lines = [
        f"predicted step time  {r['step_time_s']:.4f} s  "
        f"({r['ranks_simulated']} of {r['ranks_total']} ranks simulated, mode {r['ranks_mode']})",
    ]
    if "reference" in r:
        source = printable(cut_middle(r["reference"]["source"]))  # a config's text, any length
        lines.append(
            f"measured (reference) {r['reference']['step_time_s']:.4f} s  "
            f"error {r['reference_error_pct']:+.1f}%  [{source}]"
        )
    b = r["breakdown"]
    if b:
        lines.append(
            f"slowest rank {b['rank']}: compute {b['compute_s']:.4f} s, comm {b['comm_s']:.4f} s "
            f"(exposed {b['exposed_comm_s']:.4f} s), idle {b['idle_s']:.4f} s"
        )
    h = r["host"]
    if h["kernel_us"] > 0:
        # A host-bound step moves with the host's time per kernel: say where to set it.
        bound = "; host-bound: --set host.kernel_us=US for your host" if h["share"] > 0.5 else ""
        fills = (
            f" ({h['fills']:,} fills of new buffers at {h['fill_us']:g} µs)" if h["fills"] else ""
        )
        lines.append(
            f"host path: {1e3 * h['busy_s']:,.1f} ms of kernel issue on rank "
            f"{b['rank'] if b else '-'} ({100 * h['share']:.0f}% of the step) at "
            f"{h['kernel_us']:g} µs per kernel{fills}{bound}"
        )
    bubble = r["bubble"]
    if bubble["ideal"] == 0:  # one stage: what idles the compute stream is no pipeline bubble
        lines.append(
            f"pipeline bubble: none (one stage); the compute stream is idle "
            f"{100 * bubble['simulated']:.1f}% of the time up to its last pass"
        )
    else:
        lines.append(
            f"pipeline bubble: ideal {100 * bubble['ideal']:.1f}%, "
            f"simulated {100 * bubble['simulated']:.1f}%"
        )
    t = r["throughput"]
    flops = (
        f"{t['model_flops_per_token'] / 1e9:,.1f} GFLOP/token, "
        f"peak {t['peak_flops_per_gpu'] / 1e12:,.1f} TFLOP/s per GPU"
    )
    if t["tokens_per_s_per_gpu"] is None:
        lines.append(f"throughput: none to report: the predicted step takes no time ({flops})")
    else:
        # Model FLOPs come from the config's shape keys (PaLM's formula): past 100%, they do
        # not describe the model that was traced (a script's own model, say).
        odd = " (over 100%: the config's [model] shape does not describe the traced model)"
        lines.append(
            f"throughput: {t['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, "
            f"MFU {100 * t['mfu']:.1f}% ({flops}){odd if t['mfu'] > 1 else ''}"
        )
    if "moe" in r:
        e = r["moe"]
        lines.append(
            f"MoE: {e['experts']} experts, top-{e['top_k']}, {e['moe_layers']} MoE layers; "
            f"matmul parameters {e['matmul_params_total'] / 1e9:,.2f} B, "
            f"{e['matmul_params_active'] / 1e9:,.2f} B active; EP {e['ep']} "
            f"({e['dispatcher']}), {e['tokens_per_local_expert']:,} tokens per local expert"
        )
    mem = r["memory"]
    lines.append(
        f"memory: peak {mem['peak_bytes'] / GB:.1f} GB on stage {mem['peak_stage']}, needs "
        f"{mem['needed_bytes'] / GB:.1f} GB of {mem['gpu_bytes'] / GB:.1f} GB "
        f"({'fits' if mem['fits'] else 'OUT OF MEMORY'})"
    )
    peaks = ", ".join(f"{s['stage']}: {s['peak_bytes'] / GB:.1f}" for s in mem["stages"])
    lines.append(f"memory per stage (GB): {peaks}")
    stages = ", ".join(f"{s['stage']}: {s['step_time_s']:.3f}" for s in r["stages"])
    lines.append(f"per stage (s): {stages}")
    lines.append(
        f"graph: {r['graph']['roles']} roles, {r['graph']['ops']} ops ({r['graph']['origin']})"
    )
    return "\n".join(lines) + "\n"
