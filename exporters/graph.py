"""Write a :class:`~echo_view.model.graph.TracedGraph` as versioned traced-graph JSON.

Format (``docs/traced-graph.md`` documents every field)::

    {"format": "echo-view.traced-graph", "version": 1,
     "config": {...the workload config as TOML-shaped tables...},
     "key": {...the config parts the graph depends on...},
     "meta": {...tracer facts: attention kind, layers per chunk, torch version...},
     "strings": ["aten::mm", ...],
     "roles": [{"stages": [0], "params": N, "grad_dtype_bytes": 4,
                "forward": [TABLE per chunk], "backward": [TABLE per chunk],
                "optimizer": TABLE}]}

A TABLE is columnar: ``{"name": [...], "op_class": [...], "flops": [...], "bytes": [...],
"dtype": [...], "shapes": [...], "coll_kind": [...], "coll_bytes": [...], "axis": [...],
"grad_bytes": [...]}``, one entry per op in program order, plus ``"stream"`` and ``"wait"`` in
a graph whose ops use more than the compute stream. Gzip when the path ends in ``.gz``.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import msgspec

from echo_view.formats import atomic_output
from echo_view.model.graph import (
    GRAPH_SCHEMA_VERSION,
    OP_COLUMNS,
    OPTIONAL_COLUMNS,
    OpTable,
    TracedGraph,
)

FORMAT_NAME = "echo-view.traced-graph"


def _table(t: OpTable, streams: bool) -> dict[str, list[Any]]:
    return {c: getattr(t, c).tolist() for c in OP_COLUMNS if streams or c not in OPTIONAL_COLUMNS}


def graph_document(graph: TracedGraph) -> dict[str, Any]:
    """The JSON document of ``graph`` as plain Python data (the optional stream columns only
    when some op uses them: a graph of one stream is written as before)."""
    streams = any(
        t.streams_used for r in graph.roles for t in (*r.forward, *r.backward, r.optimizer)
    )
    return {
        "format": FORMAT_NAME,
        "version": GRAPH_SCHEMA_VERSION,
        "config": graph.config.get("config", {}),
        "key": graph.config.get("key", {}),
        "meta": graph.meta,
        "strings": list(graph.strings.strings),
        "roles": [
            {
                "stages": list(r.stages),
                "params": r.params,
                "grad_dtype_bytes": r.grad_dtype_bytes,
                "forward": [_table(t, streams) for t in r.forward],
                "backward": [_table(t, streams) for t in r.backward],
                "optimizer": _table(r.optimizer, streams),
            }
            for r in graph.roles
        ],
    }


def write_graph(graph: TracedGraph, path: Path) -> None:
    """Write ``graph`` to ``path`` atomically (gzip for ``.gz``)."""
    data = msgspec.json.encode(graph_document(graph))
    with atomic_output(Path(path)) as tmp:
        if path.name.lower().endswith(".gz"):
            with gzip.open(tmp, "wb", compresslevel=6) as f:
                f.write(data)
        else:
            tmp.write_bytes(data)
