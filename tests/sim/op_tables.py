"""Small hand-made op tables for simulator tests: one row per ``(name, op class, FLOPs, bytes)``."""

from __future__ import annotations

import numpy as np

from echo_view.model.graph import AXES, OpClass, OpTable
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


def tp_table(
    strings: StringTable, rows: list[tuple[str, int, float, int]], coll_bytes: int
) -> OpTable:
    """A bf16 table of ``(name, op class, FLOPs, collective kind or -1)`` rows whose
    collectives move ``coll_bytes`` over the tensor-parallel group."""
    n = len(rows)
    coll = np.array([r[1] == OpClass.COLLECTIVE for r in rows])
    return OpTable(
        name=np.array([strings.intern(r[0]) for r in rows]),
        op_class=np.array([r[1] for r in rows]),
        flops=np.array([r[2] for r in rows]),
        bytes=np.zeros(n, dtype=np.int64),
        dtype=np.full(n, strings.intern("bf16")),
        shapes=np.full(n, strings.intern("")),
        coll_kind=np.array([r[3] for r in rows]),
        coll_bytes=np.where(coll, coll_bytes, 0),
        axis=np.where(coll, AXES.index("tp"), -1),
        grad_bytes=np.zeros(n, dtype=np.int64),
    )
