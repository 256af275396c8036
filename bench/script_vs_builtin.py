"""The built-in GPT and the same GPT written as a script (samples/scripts/gpt_ddp.py, DDP with
automatic mixed precision), traced and simulated on one config: matrix FLOPs, parameters,
data-parallel gradient bytes and step time of each. The built-in graph gets its gradient
all-reduce from the composer, overlapped with the backward pass in buckets
(``overlap_grad_reduce``, as DDP overlaps its own); the script's graph holds DDP's bucket
all-reduces on their communication stream.

    python bench/script_vs_builtin.py [--layers 4] [--hidden 2048] [--dp 8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.loading import trace_config  # noqa: E402
from echo_view.model.config import parse_workload_config  # noqa: E402
from echo_view.model.graph import OpClass, TracedGraph  # noqa: E402
from echo_view.sim.runs import predict_workload  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--dp", type=int, default=8)
    args = parser.parse_args()
    model: dict[str, Any] = {
        "layers": args.layers,
        "hidden": args.hidden,
        "heads": args.hidden // 128,
        "seq_len": 2048,
        "vocab": 51200,
    }
    base = {
        "parallel": {"tp": 1, "pp": 1, "dp": args.dp, "overlap_grad_reduce": True},
        "batch": {"global": args.dp, "micro": 1},
        "cluster": {"gpu": "H100-SXM5-80GB", "gpus_per_node": args.dp, "nodes": 1},
        "precision": {"dtype": "bf16"},
    }
    script = str(ROOT / "samples" / "scripts" / "gpt_ddp.py")
    for name, mod in (("built-in", {"kind": "gpt"}), ("script", {"script": script})):
        cfg = parse_workload_config({**base, "model": {**model, **mod}}, str(ROOT / "x.toml"))
        graph = trace_config(cfg)
        run = predict_workload(cfg, graph, {})
        row = _row(graph)
        b = run.report["breakdown"]
        print(
            f"{name:8s}: matrix {row['matrix_tflop']:.4f} TFLOP, params {row['params']:,.0f}, "
            f"collective bytes in the graph {row['traced_coll_bytes']:,.0f}, step "
            f"{run.report['step_time_s'] * 1e3:.2f} ms (compute {b['compute_s'] * 1e3:.2f} ms, "
            f"comm {b['comm_s'] * 1e3:.2f} ms)"
        )


if __name__ == "__main__":
    main()
