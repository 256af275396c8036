"""Small hand-made op tables for simulator tests: one row per ``(name, op class, FLOPs, bytes)``."""

from __future__ import annotations

import numpy as np

from echo_view.model.graph import OpTable
from echo_view.model.strings import StringTable

Op = tuple[str, int, float, int]


def op_table(strings: StringTable, ops: list[Op]) -> OpTable:
    """A bf16 table of compute ops without shapes, collectives or gradients."""
    n = len(ops)
    return OpTable(
        name=np.array([strings.intern(o[0]) for o in ops]),
        op_class=np.array([o[1] for o in ops]),
        flops=np.array([o[2] for o in ops]),
        bytes=np.array([o[3] for o in ops], dtype=np.int64),
        dtype=np.full(n, strings.intern("bf16")),
        shapes=np.full(n, strings.intern("")),
        coll_kind=np.full(n, -1),
        coll_bytes=np.zeros(n, dtype=np.int64),
        axis=np.full(n, -1),
        grad_bytes=np.zeros(n, dtype=np.int64),
    )
