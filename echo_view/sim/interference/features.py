"""What a trace says about a kernel that matters for interference: its launch configuration
(grid, block, occupancy), the tensor shapes of the operator that launched it, the NCCL kernel
it overlaps (collective, protocol, channels) and the
GPU generation it ran on.

Launch configurations are read from the raw JSON args of every kernel at once: one regular
expression pass over the trace's args blob, each match mapped to its event row by
``searchsorted`` on the args offsets (no per-event decode).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import NONE, Trace
from echo_view.model.gpus import gpu_generation
from echo_view.model.kinds import CollectiveKind, EventKind
from echo_view.model.nccl import parse_nccl_kernel_name

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: NCCL protocols (index = stored code; ``unknown`` is 0).
PROTOCOLS: tuple[str, ...] = ("unknown", "LL", "LL128", "SIMPLE")

_TRIPLE = rb"\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]"
_NUMBER = rb"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_PATTERNS: dict[str, re.Pattern[bytes]] = {
    "grid": re.compile(rb'"grid"\s*:\s*' + _TRIPLE),
    "block": re.compile(rb'"block"\s*:\s*' + _TRIPLE),
    "blocks_per_sm": re.compile(rb'"blocks per SM"\s*:\s*' + _NUMBER),
    "occupancy": re.compile(rb'"est\. achieved occupancy %"\s*:\s*' + _NUMBER),
    "bytes": re.compile(rb'"bytes"\s*:\s*' + _NUMBER),
}


def _rows_of(trace: Trace, positions: I64) -> I64:
    offsets = trace.events.args_offsets
    assert offsets is not None
    return np.searchsorted(offsets, positions, side="right").astype(np.int64) - 1


def launch_config(trace: Trace) -> dict[str, Any]:
    """Per event of ``trace`` (all rows, -1 / NaN where the args do not say): ``grid_blocks``
    (gx*gy*gz), ``grid_x``, ``block_threads`` (bx*by*bz), ``blocks_per_sm`` and
    ``occupancy`` (Kineto's estimate, 0..1), ``bytes`` (copies)."""
    n = len(trace.events)
    blob = trace.events.args_blob
    out: dict[str, Any] = {
        "grid_blocks": np.full(n, NONE, dtype=np.int64),
        "grid_x": np.full(n, NONE, dtype=np.int64),
        "block_threads": np.full(n, NONE, dtype=np.int64),
        "blocks_per_sm": np.full(n, np.nan),
        "occupancy": np.full(n, np.nan),
        "bytes": np.full(n, NONE, dtype=np.int64),
    }
    if not blob or not n:
        return out
    for key in ("grid", "block"):
        found = [
            (m.start(), m.group(1), m.group(2), m.group(3)) for m in _PATTERNS[key].finditer(blob)
        ]
        if not found:
            continue
        # CUDA's limits are far below 2**20 per block dimension and 2**31 per grid one: bigger
        # values are damage, read as unknown.
        found = [f for f in found if all(len(d) <= 10 and int(d) < 2**31 for d in f[1:])]
        if not found:
            continue
        pos = np.array([f[0] for f in found], dtype=np.int64)
        dims = np.array([[int(f[1]), int(f[2]), int(f[3])] for f in found], dtype=np.int64)
        rows = _rows_of(trace, pos)
        if key == "grid":
            out["grid_blocks"][rows] = dims.prod(axis=1)
            out["grid_x"][rows] = dims[:, 0]
        else:
            out["block_threads"][rows] = dims.prod(axis=1)
    for key, col, scale in (
        ("blocks_per_sm", "blocks_per_sm", 1.0),
        ("occupancy", "occupancy", 0.01),
        ("bytes", "bytes", 1.0),
    ):
        found2 = [(m.start(), m.group(1)) for m in _PATTERNS[key].finditer(blob)]
        if not found2:
            continue
        pos = np.array([f[0] for f in found2], dtype=np.int64)
        vals = np.array([float(f[1]) for f in found2], dtype=np.float64) * scale
        rows = _rows_of(trace, pos)
        if col == "bytes":
            ok = np.isfinite(vals) & (vals >= 0) & (vals < 2.0**62)
            out[col][rows[ok]] = vals[ok].astype(np.int64)
        else:
            out[col][rows] = vals
    return out


def launch_shapes(trace: Trace, rows: I64) -> I64:
    """For each kernel row, an id of the tensor shapes of the CPU operator that launched it
    (same operator name, ``Input Dims`` and ``Input type`` -> same id; -1 where the trace
    does not record shapes). The operator is the one whose ``External id`` its launch call
    (matched by correlation id) carries, else the kernel's own ``External id`` (Kineto
    versions differ in which of the two points to the operator). Only the operators that
    some row points to are decoded."""
    ev = trace.events
    out = np.full(len(rows), NONE, dtype=np.int64)
    ext = _launch_external_ids(trace, rows)
    wanted = np.unique(ext[ext != NONE])
    if not len(wanted):
        return out
    ops = np.flatnonzero(ev.kind == int(EventKind.CPU_OP))
    ops = ops[np.isin(ev.external_id[ops], wanted)]
    ids: dict[tuple[int, str], int] = {}
    ext_of: list[int] = []
    shape_of: list[int] = []
    for r in ops.tolist():
        if b'"Input Dims"' not in ev.raw_args(r):
            continue
        args = ev.args(r)
        key = (int(ev.name[r]), repr((args.get("Input Dims"), args.get("Input type"))))
        ext_of.append(int(ev.external_id[r]))
        shape_of.append(ids.setdefault(key, len(ids)))
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
        info = parse_nccl_kernel_name(trace.strings[int(nid)])
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
