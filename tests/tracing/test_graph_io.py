"""Traced-graph JSON: round trip, and clear errors for broken files."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from echo_view.errors import InputError
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import OP_COLUMNS, OPTIONAL_COLUMNS, TracedGraph
from exporters.graph import write_graph
from importers.graph import is_graph_document, read_graph
from tests.conftest import TORCH_MISSING

pytest.importorskip("torch", reason=TORCH_MISSING)

from echo_view.tracing.roles import trace_workload

CFG: dict[str, Any] = {
    "model": {"kind": "gpt", "layers": 4, "hidden": 256, "heads": 8, "seq_len": 128, "vocab": 1000},
    "parallel": {"tp": 2, "pp": 2, "dp": 1},
    "batch": {"global": 4, "micro": 1},
    "cluster": {"gpu": "A100", "gpus_per_node": 4, "nodes": 1},
    "precision": {"dtype": "bf16"},
}


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_round_trip_keeps_every_column(tmp_path: Path, suffix: str) -> None:
    graph = trace_workload(parse_workload_config(CFG))
    path = tmp_path / f"g{suffix}"
    write_graph(graph, path)
    assert is_graph_document(path)
    back = read_graph(path)
    assert back.strings.strings == graph.strings.strings
    assert back.config["key"] == graph.config["key"]
    assert parse_workload_config(back.config["config"]) == parse_workload_config(CFG)
    for r0, r1 in zip(graph.roles, back.roles, strict=True):
        assert r0.stages == r1.stages and r0.params == r1.params
        for t0, t1 in zip(
            (*r0.forward, *r0.backward, r0.optimizer),
            (*r1.forward, *r1.backward, r1.optimizer),
            strict=True,
        ):
            for col in (
                "name",
                "op_class",
                "flops",
                "bytes",
                "coll_kind",
                "coll_bytes",
                "axis",
                "grad_bytes",
                "dtype",
                "shapes",
            ):
                assert np.array_equal(getattr(t0, col), getattr(t1, col)), col


def test_stream_columns_are_written_only_when_used(tmp_path: Path) -> None:
    """A graph of one stream is written without ``stream`` / ``wait`` (as before they existed)
    and read back with their defaults; a graph that uses them keeps them exactly."""
    graph = trace_workload(parse_workload_config(CFG))
    plain = tmp_path / "plain.json"
    write_graph(graph, plain)
    table = json.loads(plain.read_text())["roles"][0]["forward"][0]
    assert set(table) == set(OP_COLUMNS) - set(OPTIONAL_COLUMNS)
    fwd = read_graph(plain).roles[0].forward[0]
    assert not fwd.stream.any() and (fwd.wait == -1).all()
    role = graph.roles[0]
    t = role.forward[0]
    n = len(t)
    stream = np.arange(n) % 3
    wait = np.where(np.arange(n) % 5 == 4, np.arange(n) - 2, -1)
    streams = replace(t, stream=stream, wait=wait)
    used = TracedGraph(graph.strings, (replace(role, forward=(streams, *role.forward[1:])),))
    write_graph(used, tmp_path / "streams.json")
    back = read_graph(tmp_path / "streams.json").roles[0].forward[0]
    assert np.array_equal(back.stream, stream) and np.array_equal(back.wait, wait)


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_rejections(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a traced-graph file"):
        read_graph(_write(tmp_path / "a.json", {"traceEvents": []}))
    with pytest.raises(InputError, match="unknown traced-graph version 99"):
        read_graph(_write(tmp_path / "b.json", {"format": "echo-view.traced-graph", "version": 99}))
    bad = tmp_path / "c.json.gz"
    bad.write_bytes(gzip.compress(b'{"format": "echo-view.traced-graph"')[:-6])
    with pytest.raises(InputError, match=r"truncated gzip|invalid JSON"):
        read_graph(bad)
    doc = {
        "format": "echo-view.traced-graph",
        "version": 1,
        "strings": ["a"],
        "roles": [
            {
                "stages": [0],
                "params": 1,
                "forward": [{"name": [0]}],
                "backward": [],
                "optimizer": {},
            }
        ],
    }
    with pytest.raises(InputError, match=r"lacks column 'op_class'") as info:
        read_graph(_write(tmp_path / "d.json", doc))
    assert info.value.where == "roles[0].forward[0]"


@pytest.mark.parametrize(
    ("edit", "where", "text"),
    [
        # A ZeroDivisionError in the composer:
        (lambda d: d["roles"][0].update(grad_dtype_bytes=0), "roles[0].grad_dtype_bytes",
         "between 1 and 8, got 0"),
        # Accepted, and the step time moved:
        (lambda d: d["roles"][0].update(params=-5), "roles[0].params", "at least 0, got -5"),
        (lambda d: d["roles"][0].update(stages=[-1]), "roles[0].stages", "at least 0"),
        # A ValueError traceback from the workload's columns:
        (lambda d: d["meta"].update(param_tensors={"0": -1}), "meta.param_tensors.0",
         "at least 0, got -1"),
        (lambda d: d["meta"].update(expert_params={"1": "x"}), "meta.expert_params.1",
         "expected an integer"),
        (lambda d: d["meta"].update(param_tensors=[3]), "meta.param_tensors", "an object"),
        (lambda d: d.update(meta=[]), "meta", "must be an object"),
    ],
)  # fmt: skip
def test_values_the_simulator_cannot_use_are_refused(
    tmp_path: Path, edit: Any, where: str, text: str
) -> None:
    good = tmp_path / "good.json"
    write_graph(trace_workload(parse_workload_config(CFG)), good)
    doc = json.loads(good.read_text())
    edit(doc)
    with pytest.raises(InputError, match=text) as info:
        read_graph(_write(tmp_path / "bad.json", doc))
    assert info.value.where == where
