"""``echo-view trace CONFIG.toml -o GRAPH.json[.gz]``: trace every rank role of a workload
config on the meta device (no GPU) and write the versioned traced-graph JSON."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from echo_view.errors import UsageError
from echo_view.formats import Registry
from echo_view.loading import load_config, trace_config
from exporters.graph import write_graph


def register(subparsers: Any) -> None:
    """Add the ``trace`` sub-command."""
    p = subparsers.add_parser(
        "trace",
        description="Build each pipeline-stage role of a Megatron-style GPT on the meta "
        "device, record one micro-batch's forward and backward and the optimizer step, and "
        "write the traced graph that `echo-view simulate` accepts. Needs torch (the `trace` "
        "extra).",
    )
    p.add_argument("config", type=Path, metavar="CONFIG.toml")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="GRAPH.json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, registry: Registry) -> int:
    del registry
    out: Path = args.output
    if not out.name.endswith((".json", ".json.gz")):
        raise UsageError(
            f"cannot write a traced graph to {out.name!r}", hint="use .json or .json.gz"
        )
    cfg = load_config(args.config)
    t0 = time.perf_counter()
    graph = trace_config(cfg)
    write_graph(graph, out)
    print(
        f"traced {len(graph.roles)} role(s), {graph.op_count()} ops in "
        f"{time.perf_counter() - t0:.1f} s -> {out}",
        file=sys.stderr,
    )
    return 0
