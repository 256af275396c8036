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
from importers.nsys.args import Ints, Packed, assemble
from importers.nsys.db import Export
from importers.nsys.tables import (
    GPU_INTS,
    I64,
    SYNC_TYPES,
    Names,
    Rows,
    factorize,
    gpu_rows,
    json_pieces,
    names_by_code,
)

SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
EVENTS = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"


def read_sync(exp: Export, names: Names, work: Sequence[Rows]) -> Rows | None:
    """Synchronisation records with their device fixed and their args built."""
    if not exp.has(SYNC):
        return None
    c = exp.read(SYNC, {**GPU_INTS, "syncType": 0, "eventId": -1, "eventSyncId": -1})
    i = c.ints
    gids = names_by_code(names, i["syncType"], lambda k: SYNC_TYPES.get(k, "Unknown Sync"))
    rows = gpu_rows(c, EventKind.SYNC, gids, names.intern("cuda_sync"), Packed.empty(len(c)))
    fix_sync_devices(work, rows)
    stream, corr = _event_records(exp, rows, i["eventId"], i["eventSyncId"])
    fields = [("device", rows.device), ("stream", rows.stream), ("correlation", rows.correlation)]
    head = json_pieces([*fields, ("event", i["eventId"])])
    # Kineto's keys for the wait, where the record it waits on is known.
    waits = np.flatnonzero(corr >= 0)
    plain = np.flatnonzero(corr < 0)
    parts = [assemble(len(plain), [*(_take(p, plain) for p in head), b"}"])]
    if len(waits):
        wait = json_pieces(
            [("wait_on_stream", stream), ("wait_on_cuda_event_record_corr_id", corr)], False
        )
        pieces = [_take(p, waits) for p in (*head, *wait)]
        parts.append(assemble(len(waits), [*pieces, b"}"]))
    order = np.empty(len(c), dtype=np.int64)
    order[np.concatenate([plain, waits])] = np.arange(len(c))
    rows.args = Packed.concat(parts).take(order)
    return rows


def fix_sync_devices(work: Sequence[Rows], sync: Rows) -> None:
    """Take each record's device from the GPU work of its process and CUDA context."""
    ctx = [w for w in work if w.context is not None and len(w)]
    if sync.context is None or not ctx or not len(sync):
        return
    proc = np.concatenate([w.process for w in ctx])
    key_work = np.concatenate([w.context for w in ctx if w.context is not None]) & 0xFFFFFFFF
    dev = np.concatenate([w.device for w in ctx])
    _, inv = factorize(np.concatenate([proc, sync.process]))
    key_work = (inv[: len(proc)] << 32) | key_work
    key_sync = (inv[len(proc) :] << 32) | (sync.context & 0xFFFFFFFF)
    order = np.argsort(key_work, kind="stable")
    pos = np.minimum(np.searchsorted(key_work[order], key_sync), len(order) - 1)
    hit = key_work[order[pos]] == key_sync
    sync.device[hit] = dev[order[pos[hit]]]


def _take(piece: bytes | Ints, rows: I64) -> bytes | Ints:
    return piece if isinstance(piece, bytes) else Ints(piece.values[rows])


def _event_records(exp: Export, sync: Rows, event: I64, sync_id: I64) -> tuple[I64, I64]:
    """Stream and correlation id of the event record each sync waits on (-1 when unknown)."""
    n = len(sync)
    stream, corr = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    if not n or not exp.has(EVENTS) or not {"eventId", "streamId"} <= exp.columns(EVENTS):
        return stream, corr
    rec = exp.read(
        EVENTS,
        {"globalPid": 0, "eventId": -1, "streamId": -1, "correlationId": -1, "eventSyncId": -1},
    ).ints
    if not len(rec["eventId"]):
        return stream, corr
    found = np.full(n, -1, dtype=np.int64)
    # By eventSyncId where both sides record it (the last record of an id wins).
    rid = rec["eventSyncId"]
    by_id = np.flatnonzero(rid > 0)
    if len(by_id):
        o = by_id[np.argsort(rid[by_id], kind="stable")]
        at = np.searchsorted(rid[o], sync_id, side="right") - 1
        hit = (sync_id > 0) & (at >= 0) & (rid[o[np.maximum(at, 0)]] == sync_id)
        found[hit] = o[at[hit]]
    # Else the latest record of the same event in the same process before the wait.
    _, p = factorize(np.concatenate([rec["globalPid"], sync.process]))
    _, e = factorize(np.concatenate([rec["eventId"], event]))
    _, key = factorize(p * (int(e.max(initial=0)) + 1) + e)
    rkey, skey = key[: len(rid)], key[len(rid) :]
    # One sortable key per (event, correlation id); ids are 32-bit, -1 (NULL) sorts first.
    rcorr = rec["correlationId"]
    o = np.lexsort((rcorr, rkey))
    packed = (rkey[o] << 33) | ((rcorr[o] + 1) & 0x1FFFFFFFF)
    target = (skey << 33) | ((sync.correlation + 1) & 0x1FFFFFFFF)
    at = np.searchsorted(packed, target, side="left") - 1
    ok = (at >= 0) & (sync.correlation >= 0)
    ok[ok] = rkey[o[at[ok]]] == skey[ok]
    rest = (found < 0) & ok
    found[rest] = o[at[rest]]
    use = found >= 0
    stream[use], corr[use] = rec["streamId"][found[use]], rec["correlationId"][found[use]]
    return stream, corr
