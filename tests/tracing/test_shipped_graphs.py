"""Every traced graph shipped beside a sample config is what tracing that config gives today.

`simulate` uses a graph found beside its config when the graph's tracing key matches, without
re-tracing; a graph written by an older tracer (or for a config edited since) would silently
stand for a different model. Regenerate one with ``echo-view trace CONFIG.toml -o
CONFIG_STEM.graph.json.gz``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from echo_view.loading import beside_graph, graph_for_config, load_config
from tests.conftest import SAMPLES, TORCH_MISSING
from tests.tracing.graph_equality import assert_same_graph

pytest.importorskip("torch", reason=TORCH_MISSING)

from echo_view.tracing.roles import trace_workload

SHIPPED = sorted(p for p in (SAMPLES / "configs").rglob("*.toml") if beside_graph(p).is_file())


def test_the_samples_ship_graphs() -> None:
    assert len(SHIPPED) >= 50


@pytest.mark.slow
@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: p.stem)
def test_a_shipped_graph_equals_a_fresh_trace(config: Path) -> None:
    cfg = load_config(config)
    graph, origin = graph_for_config(cfg, config)
    assert origin == "beside", "the graph's tracing key does not match its config"
    assert_same_graph(graph, trace_workload(cfg), key_only=True)
