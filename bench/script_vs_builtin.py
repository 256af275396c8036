"""The built-in GPT and the same GPT written as a script (samples/scripts/gpt_ddp.py, DDP with
automatic mixed precision), traced and simulated on one config: matrix FLOPs, parameters,
data-parallel gradient bytes and step time of each, and the step split by op class
(``ConfigSimulation.class_ns``); ``--ops`` adds the op groups whose time differs. The built-in
model runs the script's program (the PyTorch-native keys: autocast, PyTorch's DDP, clipping and
cross entropy; ``--megatron``: its Megatron-LM defaults instead). The built-in graph gets its
gradient all-reduce from the composer, overlapped with the backward pass in buckets of DDP's
size (``overlap_grad_reduce``, ``ddp_bucket_size``); the script's graph holds DDP's bucket
all-reduces on their communication stream.

With ``--moe CONFIG``: an MoE config with ``[model] script`` (its graph beside it) against the
built-in MoE layer of the same shape and layout (the script key dropped, ``overlap_grad_reduce``
on): step time, compute and communication, and the time of one MoE layer's dispatch and combine
all-to-alls each way (the routed model both take, and the NCCL all-to-all model for the
script's bytes).

    python bench/script_vs_builtin.py [--layers 4] [--hidden 2048] [--dp 8] [--ops] [--megatron]
    python bench/script_vs_builtin.py --moe samples/scripts/moe_ep_mixtral_16xh100.toml
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: DDP's default ``bucket_cap_mb`` (25 MiB) of fp32 gradients, in parameters.
DDP_BUCKET_PARAMS = 25 * 2**20 // 4
sys.path.insert(0, str(ROOT))

from echo_view.loading import load_workload, trace_config  # noqa: E402
from echo_view.model.config_keys import config_to_mapping  # noqa: E402
from echo_view.model.config_parse import parse_workload_config  # noqa: E402
from echo_view.model.graph import AXES, OpClass, TracedGraph  # noqa: E402
from echo_view.model.kinds import CollectiveKind  # noqa: E402
from echo_view.sim.cluster import cluster_from_config  # noqa: E402
from echo_view.sim.comm import model_for_library  # noqa: E402
from echo_view.sim.comm.defaults import default_comm_model  # noqa: E402
from echo_view.sim.layout import Layout  # noqa: E402
from echo_view.sim.moe import A2A_PHASES  # noqa: E402
from echo_view.sim.runs import WorkloadRun, predict_workload  # noqa: E402


def _row(graph: TracedGraph) -> dict[str, float]:
    role = graph.roles[0]
    tables = (*role.forward, *role.backward, role.optimizer)
    mat = sum(
        float(t.flops[np.isin(t.op_class, [OpClass.GEMM, OpClass.ATTENTION])].sum()) for t in tables
    )
    return {
        "matrix_tflop": mat / 1e12,
        "params": float(role.params),
        "traced_coll_bytes": float(sum(int(t.coll_bytes.sum()) for t in tables)),
    }


def _collective_counts(graph: TracedGraph) -> dict[tuple[str, str, int], int]:
    """(kind, axis, bytes) -> how many, over one micro-batch's passes."""
    out: dict[tuple[str, str, int], int] = {}
    role = graph.roles[0]
    for t in (*role.forward, *role.backward):
        for i in t.collective_rows().tolist():
            key = (t.coll(i).label, AXES[int(t.axis[i])], int(t.coll_bytes[i]))
            out[key] = out.get(key, 0) + 1
    return out


def _a2a_ms(run: WorkloadRun) -> str:
    """The modelled time of the MoE all-to-alls of one micro-batch's passes (the composer's
    per-op costs of the graph's tables), by graph name."""
    graph = run.sim.graph
    times: dict[str, list[int]] = {}
    for tc in run.sim.composed.tables:
        for i in tc.table.collective_rows().tolist():
            name = graph.strings[int(tc.table.name[i])]
            if name in A2A_PHASES:
                times.setdefault(name, []).append(int(tc.dur_ns[i]))
    return ", ".join(f"{len(t)} x {n} {np.mean(t) / 1e6:.3f} ms" for n, t in sorted(times.items()))


def compare_moe(path: Path) -> None:
    """The ``--moe`` comparison (module docstring)."""
    cfg, graph, _, _ = load_workload(path)
    data = config_to_mapping(cfg)
    model = {k: v for k, v in data["model"].items() if k != "script"} | {"kind": "gpt"}
    parallel = {**data["parallel"], "overlap_grad_reduce": True}
    builtin_cfg = parse_workload_config({**data, "model": model, "parallel": parallel}, str(path))
    builtin = trace_config(builtin_cfg)
    for name, c, g in (("script", cfg, graph), ("built-in", builtin_cfg, builtin)):
        run = predict_workload(c, g, {})
        row, b = _row(g), run.report["breakdown"]
        print(
            f"{name:8s}: step {run.report['step_time_s'] * 1e3:.1f} ms (compute "
            f"{b['compute_s'] * 1e3:.1f} ms, comm {b['comm_s'] * 1e3:.1f} ms), matrix "
            f"{row['matrix_tflop']:.3f} TFLOP/micro-batch, params {row['params']:,.0f}, "
            f"{_a2a_ms(run)}"
        )
        for (kind, axis, nbytes), n in sorted(_collective_counts(g).items()):
            print(f"          {n:4d} x {kind} over {axis}: {nbytes:,} B")
    # The script's dispatch bytes timed as a plain NCCL all-to-all, for comparison.
    table = graph.roles[0].forward[0]
    row_i = next(i for i in table.collective_rows().tolist() if table.coll(i).label == "all_to_all")
    ranks = Layout.of(cfg.parallel).group("ep", 0)
    cluster = cluster_from_config(cfg.cluster, cfg.source)
    nccl = model_for_library("nccl", default_comm_model())
    t = nccl.collective_time_ns(
        CollectiveKind.ALL_TO_ALL, int(table.coll_bytes[row_i]), ranks, cluster
    )
    print(f"NCCL all-to-all model, same bytes over {ranks}: {t / 1e6:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moe", type=Path, metavar="CONFIG")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--dp", type=int, default=8)
    parser.add_argument("--ops", action="store_true", help="also the time of each op by pass")
    parser.add_argument(
        "--megatron",
        action="store_true",
        help="the built-in model as the Megatron-LM program (its defaults), not the script's",
    )
    args = parser.parse_args()
    if args.moe is not None:
        compare_moe(args.moe)
        return
    model: dict[str, Any] = {
        "layers": args.layers,
        "hidden": args.hidden,
        "heads": args.hidden // 128,
        "seq_len": 2048,
        "vocab": 51200,
    }
    base: dict[str, Any] = {
        # DDP's buckets (bucket_cap_mb = 25 MiB of fp32 gradients) as Megatron's bucket size.
        "parallel": {
            "tp": 1,
            "pp": 1,
            "dp": args.dp,
            "overlap_grad_reduce": True,
            "ddp_bucket_size": DDP_BUCKET_PARAMS,
        },
        "batch": {"global": args.dp, "micro": 1},
        "cluster": {"gpu": "H100-SXM5-80GB", "gpus_per_node": args.dp, "nodes": 1},
        "precision": {"dtype": "bf16"},
    }
    script = str(ROOT / "samples" / "scripts" / "gpt_ddp.py")
    classes: dict[str, dict[str, int]] = {}
    ops: dict[str, dict[tuple[str, str, str, str], int]] = {}
    builtin = {**base, "model": {**model, "kind": "gpt"}}
    if not args.megatron:
        builtin = torch_native(builtin)
    for name, data in (
        ("built-in", builtin),
        ("script", {**base, "model": {**model, "script": script}}),
    ):
        cfg = parse_workload_config(data, str(ROOT / "x.toml"))
        graph = trace_config(cfg)
        run = predict_workload(cfg, graph, {})
        row = _row(graph)
        b = run.report["breakdown"]
        classes[name] = run.sim.class_ns(b["rank"])
        ops[name] = _op_ns(run)
        print(
            f"{name:8s}: matrix {row['matrix_tflop']:.4f} TFLOP, params {row['params']:,.0f}, "
            f"collective bytes in the graph {row['traced_coll_bytes']:,.0f}, step "
            f"{run.report['step_time_s'] * 1e3:.2f} ms (compute {b['compute_s'] * 1e3:.2f} ms, "
            f"comm {b['comm_s'] * 1e3:.2f} ms)"
        )
    _print_classes(classes["built-in"], classes["script"])
    if args.ops:
        _print_ops(ops["built-in"], ops["script"])


def torch_native(data: dict[str, Any]) -> dict[str, Any]:
    """A built-in GPT config mapping set to the PyTorch-native program of
    ``samples/scripts/gpt_ddp.py``: autocast, PyTorch's DDP, clipping and cross entropy."""
    return {
        **data,
        "model": {**data["model"], "cross_entropy": "torch"},
        "parallel": {**data["parallel"], "ddp": "torch"},
        "precision": {**data["precision"], "autocast": True},
        "training": {**data.get("training", {}), "clip_grad_norm": "torch"},
    }


def _op_ns(run: WorkloadRun) -> dict[tuple[str, str, str, str], int]:
    """Kernel time of one step's passes by (pass, op class, op, dtype), as the cost models
    give it (one micro-batch: each pass once)."""
    graph = run.sim.graph
    role = graph.roles[0]
    phase = {id(t): "forward" for t in role.forward} | {id(t): "backward" for t in role.backward}
    phase[id(role.optimizer)] = "optimizer"
    out: dict[tuple[str, str, str, str], int] = {}
    for tc in run.sim.composed.tables:
        t = tc.table
        for i in range(len(t)):
            key = (
                phase.get(id(t), "?"),
                OpClass.NAMES[int(t.op_class[i])],
                graph.strings[int(t.name[i])],
                graph.strings[int(t.dtype[i])] if t.coll_kind[i] < 0 else "",
            )
            out[key] = out.get(key, 0) + int(tc.dur_ns[i])
    return out


def _print_ops(
    builtin: dict[tuple[str, str, str, str], int], script: dict[tuple[str, str, str, str], int]
) -> None:
    """Op groups whose time differs by 0.05 ms or more, largest difference first."""
    rows = [(k, builtin.get(k, 0), script.get(k, 0)) for k in {*builtin, *script}]
    rows = [r for r in rows if abs(r[2] - r[1]) >= 50_000]
    print("| pass | class | op | dtype | built-in (ms) | script (ms) | script - built-in |")
    print("|---|---|---|---|---:|---:|---:|")
    for (ph, cls, op, dt), b, s in sorted(rows, key=lambda r: -abs(r[2] - r[1])):
        ms = f"{b / 1e6:.3f} | {s / 1e6:.3f} | {(s - b) / 1e6:+.3f}"
        print(f"| {ph} | {cls} | `{op}` | {dt} | {ms} |")


def _print_classes(builtin: dict[str, int], script: dict[str, int]) -> None:
    """The step by op class (``ConfigSimulation.class_ns``), built-in against script, ms."""
    print("| time (ms) | built-in | script | script - built-in |")
    print("|---|---:|---:|---:|")
    for k, v in builtin.items():
        if v or script[k]:
            print(f"| {k} | {v / 1e6:.3f} | {script[k] / 1e6:.3f} | {(script[k] - v) / 1e6:+.3f} |")


if __name__ == "__main__":
    main()
