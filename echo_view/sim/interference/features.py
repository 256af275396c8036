"""What a trace says about a kernel that matters for interference: its launch configuration
(grid, block, occupancy), the tensor shapes of the operator that launched it, the NCCL kernel
it overlaps (collective, protocol, channels) and the
GPU generation it ran on.

Launch configurations and operator shapes come from the trace's typed side tables
(:attr:`Trace.launches`, :attr:`Trace.op_inputs`), filled by the importers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import NONE, Trace
from echo_view.model.comm_kernels import parse_comm_kernel_name
from echo_view.model.gpus import gpu_generation
from echo_view.model.kinds import CollectiveKind, EventKind

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: NCCL protocols (index = stored code; ``unknown`` is 0).
PROTOCOLS: tuple[str, ...] = ("unknown", "LL", "LL128", "SIMPLE")


def launch_config(trace: Trace) -> dict[str, Any]:
    """Per event of ``trace`` (all rows, -1 / NaN where the trace does not say): ``grid_blocks``
    (gx*gy*gz), ``grid_x``, ``block_threads`` (bx*by*bz), ``blocks_per_sm`` and
    ``occupancy`` (the profiler's estimate, 0..1), ``bytes`` (copies)."""
    n = len(trace.events)
    la = trace.launches
    out: dict[str, Any] = {
        "grid_blocks": np.full(n, NONE, dtype=np.int64),
        "grid_x": np.full(n, NONE, dtype=np.int64),
        "block_threads": np.full(n, NONE, dtype=np.int64),
        "blocks_per_sm": np.full(n, np.nan),
        "occupancy": np.full(n, np.nan),
        "bytes": np.full(n, NONE, dtype=np.int64),
    }
    rows = la.event
    grid = la.grid_x >= 0
    out["grid_x"][rows[grid]] = la.grid_x[grid]
    out["grid_blocks"][rows[grid]] = _product(la.grid_x, la.grid_y, la.grid_z)[grid]
    block = la.block_x >= 0
    out["block_threads"][rows[block]] = _product(la.block_x, la.block_y, la.block_z)[block]
    out["blocks_per_sm"][rows] = la.blocks_per_sm
    out["occupancy"][rows] = la.occupancy
    out["bytes"][rows] = la.bytes
    return out


def _product(x: I64, y: I64, z: I64) -> I64:
    """``x * y * z``, held at int64's largest where it would wrap: CUDA bounds a grid to
    (2^31 - 1) x 65,535 x 65,535, whose product fits, but a trace's numbers are its own."""
    out = x.astype(np.int64) * y.astype(np.int64) * z.astype(np.int64)
    big = np.abs(x.astype(np.float64) * y.astype(np.float64) * z.astype(np.float64)) >= 2.0**63
    out[big] = np.iinfo(np.int64).max
    return out


def launch_shapes(trace: Trace, rows: I64) -> I64:
    """For each kernel row, an id of the tensor shapes of the CPU operator that launched it
    (same operator name, ``Input Dims`` and ``Input type`` -> same id; -1 where the trace
    does not record shapes). The operator is the one whose ``External id`` its launch call
    (matched by correlation id) carries, else the kernel's own ``External id`` (Kineto
    versions differ in which of the two points to the operator)."""
    ev = trace.events
    out = np.full(len(rows), NONE, dtype=np.int64)
    ext = _launch_external_ids(trace, rows)
    wanted = np.unique(ext[ext != NONE])
    if not len(wanted):
        return out
    inputs = trace.op_inputs
    at = np.flatnonzero(ev.kind[inputs.event] == int(EventKind.CPU_OP))
    at = at[np.isin(ev.external_id[inputs.event[at]], wanted)]
    ops = inputs.event[at]
    ids: dict[tuple[int, int, int], int] = {}
    ext_of = ev.external_id[ops].astype(np.int64).tolist()
    shape_of = [
        ids.setdefault((int(ev.name[r]), int(inputs.dims[i]), int(inputs.types[i])), len(ids))
        for r, i in zip(ops.tolist(), at.tolist(), strict=True)
    ]
    if not ext_of:
        return out
    keys = np.asarray(ext_of, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    keys, vals = keys[order], np.asarray(shape_of, dtype=np.int64)[order]
    pos = np.clip(np.searchsorted(keys, ext), 0, len(keys) - 1)
    hit = (keys[pos] == ext) & (ext != NONE)
    out[hit] = vals[pos[hit]]
    return out


def _launch_external_ids(trace: Trace, rows: I64) -> I64:
    """The ``External id`` of each row's launch call (same correlation id, a runtime or
    driver event), or the row's own where no launch is found."""
    ev = trace.events
    own = ev.external_id[rows].astype(np.int64)
    calls = np.flatnonzero(
        ((ev.kind == int(EventKind.RUNTIME)) | (ev.kind == int(EventKind.DRIVER)))
        & (ev.correlation != NONE)
        & (ev.external_id != NONE)
    )
    if not len(calls):
        return own
    corr = ev.correlation[calls].astype(np.int64)
    order = np.argsort(corr, kind="stable")
    corr, calls = corr[order], calls[order]
    want = ev.correlation[rows]
    pos = np.clip(np.searchsorted(corr, want), 0, len(corr) - 1)
    hit = (corr[pos] == want) & (want != NONE)
    out: I64 = np.where(hit, ev.external_id[calls[pos]], own)
    return out


def trace_generation(trace: Trace) -> int:
    """The GPU generation of the trace's first described device (``unknown`` when none)."""
    for dev in trace.devices:
        gen = gpu_generation(dev.name, dev.compute_capability)
        if gen:
            return gen
    return 0


def comm_features(trace: Trace, rows: I64, grid_x: I64) -> tuple[I64, I64, I64]:
    """For communication kernel rows: ``(collective kind, protocol code, channels)``.

    The collective comes from the trace's collective table when it points at the row, else
    from the kernel name; the protocol from the name or the collective table; the channel
    count is the kernel's grid x (NCCL launches one block per channel). Unknown: -1 / 0 / -1.
    """
    ev = trace.events
    kind = np.full(len(rows), int(CollectiveKind.UNKNOWN), dtype=np.int64)
    proto = np.zeros(len(rows), dtype=np.int64)
    names = ev.name[rows]
    for nid in np.unique(names).tolist():
        info = parse_comm_kernel_name(trace.strings[int(nid)])
        if info is None:
            continue
        sel = names == nid
        kind[sel] = int(info.collective)
        if info.protocol in PROTOCOLS:
            proto[sel] = PROTOCOLS.index(info.protocol)
    colls = trace.collectives
    if len(colls):
        order = np.argsort(colls.event, kind="stable")
        ev_sorted = colls.event[order]
        idx = np.minimum(np.searchsorted(ev_sorted, rows), len(ev_sorted) - 1)
        hit = ev_sorted[idx] == rows
        c = order[idx[hit]]
        table_kind = colls.kind[c].astype(np.int64)
        known = table_kind != int(CollectiveKind.UNKNOWN)
        sub = kind[hit]
        sub[known] = table_kind[known]
        kind[hit] = sub
        pid = colls.protocol[c]
        texts = np.array(
            [PROTOCOLS.index(t) if (t := _string(trace, int(p))) in PROTOCOLS else 0 for p in pid],
            dtype=np.int64,
        ) if len(pid) else np.zeros(0, dtype=np.int64)  # fmt: skip
        sub_p = proto[hit]
        fill = (sub_p == 0) & (texts > 0)
        sub_p[fill] = texts[fill]
        proto[hit] = sub_p
    channels = grid_x[rows] if len(rows) else np.zeros(0, dtype=np.int64)
    return kind, proto, np.asarray(channels, dtype=np.int64)


def _string(trace: Trace, sid: int) -> str:
    return trace.strings[sid] if 0 <= sid < len(trace.strings) else ""
