"""Row-for-row equality of two traced graphs (for tests that compare a graph with a re-trace)."""

from __future__ import annotations

import numpy as np

from echo_view.model.graph import OP_COLUMNS, TracedGraph


def assert_same_graph(a: TracedGraph, b: TracedGraph, *, key_only: bool = False) -> None:
    """Same strings, config, roles and op columns; ``meta`` equal except the torch version.

    With ``key_only`` only the config's tracing key must match: the rest (cluster, batch,
    simulation-only settings) does not reach the ops."""
    assert a.strings.strings == b.strings.strings
    assert a.config["key"] == b.config["key"]
    if not key_only:
        assert a.config == b.config
    assert {k: v for k, v in a.meta.items() if k != "torch"} == {
        k: v for k, v in b.meta.items() if k != "torch"
    }
    assert len(a.roles) == len(b.roles)
    for ra, rb in zip(a.roles, b.roles, strict=True):
        assert (ra.stages, ra.params, ra.grad_dtype_bytes) == (
            rb.stages,
            rb.params,
            rb.grad_dtype_bytes,
        )
        tables_a = (*ra.forward, *ra.backward, ra.optimizer)
        tables_b = (*rb.forward, *rb.backward, rb.optimizer)
        assert len(tables_a) == len(tables_b)
        for ta, tb in zip(tables_a, tables_b, strict=True):
            for col in OP_COLUMNS:
                got, want = getattr(ta, col), getattr(tb, col)
                assert got.dtype == want.dtype and np.array_equal(got, want), (ra.stages, col)
