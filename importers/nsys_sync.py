"""CUDA synchronisation records of an Nsight Systems export.

CUPTI's synchronisation records carry no device (Nsight writes 0): the device comes from the GPU
work of the same process and CUDA context. A ``Stream Wait Event`` or ``Event Sync`` is linked
to the ``cudaEventRecord`` it waits on when the capture recorded CUDA events
(``CUPTI_ACTIVITY_KIND_CUDA_EVENT`` rows): by ``eventSyncId`` where both tables have it, else
the latest record of the same event id in the process before the wait. The args then carry Kineto's
``wait_on_stream`` and ``wait_on_cuda_event_record_corr_id``, which the replay uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from echo_view.model.kinds import EventKind
from importers.nsys_db import Export
from importers.nsys_tables import (
    GPU_COLS,
    I64,
    SYNC_TYPES,
    Names,
    Rows,
    gpu_rows,
    int_matrix,
    names_by_code,
)

SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
EVENTS = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"


def read_sync(exp: Export, names: Names, work: Sequence[Rows]) -> Rows | None:
    """Synchronisation records with their device fixed and their args built."""
    if not exp.has(SYNC):
        return None
    c = exp.col
    sql = (
        f"SELECT {GPU_COLS}, {c(SYNC, 'syncType', '0')}, {c(SYNC, 'eventId')}, "
        f'{c(SYNC, "eventSyncId")} FROM "{SYNC}"'
    )
    m = int_matrix(exp.query(sql, SYNC), 10)
    gids = names_by_code(names, m[:, 7], lambda k: SYNC_TYPES.get(k, "Unknown Sync"))
    rows = gpu_rows(m, EventKind.SYNC, gids, names.intern("cuda_sync"), [])
    fix_sync_devices(work, rows)
    stream, corr = _event_records(exp, rows, m[:, 8], m[:, 9])
    rows.args = [
        (
            f'{{"device":{d},"stream":{s},"correlation":{k},"event":{e}'
            + (
                f',"wait_on_stream":{ws},"wait_on_cuda_event_record_corr_id":{wc}'
                if wc >= 0
                else ""
            )
            + "}"
        ).encode()
        for d, s, k, e, ws, wc in zip(
            rows.device.tolist(),
            rows.stream.tolist(),
            rows.correlation.tolist(),
            m[:, 8].tolist(),
            stream.tolist(),
            corr.tolist(),
            strict=True,
        )
    ]
    return rows


def fix_sync_devices(work: Sequence[Rows], sync: Rows) -> None:
    """Take each record's device from the GPU work of its process and CUDA context."""
    ctx = [w for w in work if w.context is not None and len(w)]
    if sync.context is None or not ctx or not len(sync):
        return
    proc = np.concatenate([w.process for w in ctx])
    key_work = np.concatenate([w.context for w in ctx if w.context is not None]) & 0xFFFFFFFF
    dev = np.concatenate([w.device for w in ctx])
    _, inv = np.unique(np.concatenate([proc, sync.process]), return_inverse=True)
    inv = inv.reshape(-1).astype(np.int64)
    key_work = (inv[: len(proc)] << 32) | key_work
    key_sync = (inv[len(proc) :] << 32) | (sync.context & 0xFFFFFFFF)
    order = np.argsort(key_work, kind="stable")
    pos = np.minimum(np.searchsorted(key_work[order], key_sync), len(order) - 1)
    hit = key_work[order[pos]] == key_sync
    sync.device[hit] = dev[order[pos[hit]]]


def _event_records(exp: Export, sync: Rows, event: I64, sync_id: I64) -> tuple[I64, I64]:
    """Stream and correlation id of the event record each sync waits on (-1 when unknown)."""
    n = len(sync)
    stream, corr = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    if not n or not exp.has(EVENTS) or not {"eventId", "streamId"} <= exp.columns(EVENTS):
        return stream, corr
    c = exp.col
    sql = (
        f"SELECT {c(EVENTS, 'globalPid', '0')}, eventId, streamId, {c(EVENTS, 'correlationId')}, "
        f'{c(EVENTS, "eventSyncId")} FROM "{EVENTS}"'
    )
    rec = int_matrix(exp.query(sql, EVENTS), 5)
    if not len(rec):
        return stream, corr
    by_sync_id = {int(k): i for i, k in enumerate(rec[:, 4].tolist()) if k > 0}
    by_event: dict[tuple[int, int], list[int]] = {}
    for i, (p, e) in enumerate(zip(rec[:, 0].tolist(), rec[:, 1].tolist(), strict=True)):
        by_event.setdefault((p, e), []).append(i)
    for lst in by_event.values():
        lst.sort(key=lambda i: int(rec[i, 3]))
    for j in range(n):
        i = by_sync_id.get(int(sync_id[j]), -1) if sync_id[j] > 0 else -1
        if i < 0:
            cands = by_event.get((int(sync.process[j]), int(event[j])), [])
            before = [k for k in cands if rec[k, 3] < sync.correlation[j]]
            i = before[-1] if before else -1
        if i >= 0:
            stream[j], corr[j] = rec[i, 2], rec[i, 3]
    return stream, corr
