"""NCCL collective parameters from NCCL's NVTX payloads.

The real samples were exported without payloads, so these tests add them to a copy: binary
blobs laid out by the sample's own ``NVTX_PAYLOAD_SCHEMA_ENTRIES`` (NCCL's schemas: communicator
id, message size, peer rank), or JSON text as ``--include-json=true`` writes it.
"""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import msgspec
import numpy as np
import pytest

from echo_view.model import CollectiveKind, EventKind
from importers.nsys import NsysImporter
from importers.nsys.nccl import Collective, Communicator, _apply, payload_from_fields
from tests.importers.nsys.capture import Proc, build
from tests.importers.nsys.helpers import query, unpacked

COMM = 0x00ABCDEF12345678
SEND_BYTES, RECV_BYTES = 1 << 20, 3 << 20
SEND_RECV_SCHEMA = 16777225  # (communicator id: u64, message size: size_t, peer rank: int)
INIT_SCHEMA = 16777218  # (communicator id: u64, no. of ranks: int, rank: int, CUDA device: int)


def _blob(schema: int, payload: bytes) -> bytes:
    # Nsight's binaryData: [domainId][schemaId][payloadSize][payloadOffset] (u64 each), payload.
    return struct.pack("<QQQQ", 1, schema, len(payload), 32) + payload


def _with_payloads(tmp_path: Path, kind: str) -> Path:
    path = unpacked("mfu_2gpu_before", tmp_path)
    con = sqlite3.connect(path)
    flag = "EXPORT_PARAM_INCLUDE_BLOBS" if kind == "blob" else "EXPORT_PARAM_INCLUDE_JSON"
    con.execute("UPDATE META_DATA_EXPORT SET value = 'true' WHERE name = ?", (flag,))
    rows = con.execute(
        "SELECT n.rowid, s.value, (n.globalTid >> 24) & 16777215 FROM NVTX_EVENTS n "
        "JOIN StringIds s ON s.id = n.textId WHERE n.domainId = 1 "
        "AND s.value IN ('ncclSend', 'ncclRecv')"
    ).fetchall()
    pids = sorted({pid for _, _, pid in rows})
    for rowid, name, pid in rows:
        size = SEND_BYTES if name == "ncclSend" else RECV_BYTES
        peer = 1 - pids.index(pid)
        if kind == "blob":
            value = _blob(SEND_RECV_SCHEMA, struct.pack("<QQi4x", COMM, size, peer))
            con.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE rowid = ?", (value, rowid))
        else:
            text = msgspec.json.encode(
                {"NCCL communicator ID": COMM, "Message size [bytes]": size, "Peer rank": peer}
            ).decode()
            con.execute("UPDATE NVTX_EVENTS SET jsonText = ? WHERE rowid = ?", (text, rowid))
    # ncclCommInitRank of each process, before the window's first call.
    (name_id,) = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()
    con.execute("INSERT INTO StringIds VALUES (?, 'ncclCommInitRank')", (name_id,))
    (first,) = con.execute("SELECT min(start) FROM NVTX_EVENTS").fetchone()
    for rank, pid in enumerate(pids):
        (tid,) = con.execute(
            "SELECT globalTid FROM NVTX_EVENTS WHERE (globalTid >> 24) & 16777215 = ? LIMIT 1",
            (pid,),
        ).fetchone()
        payload = struct.pack("<Qiii4x", COMM, 2, rank, rank)
        blob = _blob(INIT_SCHEMA, payload) if kind == "blob" else None
        init_text: str | None = (
            None
            if kind == "blob"
            else msgspec.json.encode(
                {"NCCL communicator ID": COMM, "No. of ranks": 2, "Rank": rank}
            ).decode()
        )
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId, domainId, "
            "binaryData, jsonText) VALUES (?, ?, 59, ?, ?, 1, ?, ?)",
            (first - 1000, first - 500, tid, name_id, blob, init_text),
        )
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("kind", ["blob", "json"])
def test_send_recv_sizes_and_communicator(tmp_path: Path, kind: str) -> None:
    job = NsysImporter().read([_with_payloads(tmp_path, kind)])
    assert not job.meta["notes"]
    for trace in job:
        coll = trace.collectives
        attributed = coll.bytes >= 0
        # Every kernel whose launch is inside the window is matched to its group of calls:
        # two ncclSend and two ncclRecv; the size is what this rank sends.
        assert attributed.sum() >= len(coll) - 1
        assert set(coll.bytes[attributed].tolist()) == {2 * SEND_BYTES}
        assert set(coll.group[attributed].tolist()) == {0}
        (group,) = trace.groups
        assert group.name == f"nccl:{COMM:016x}"
        assert "2 ranks" in group.description
        assert group.ranks == (0, 1)  # from each process's ncclCommInitRank payload
        args = trace.events.args(int(coll.event[np.flatnonzero(attributed)[0]]))
        assert args["communicator"] == f"0x{COMM:016x}"
        assert args["bytes"] == 2 * SEND_BYTES
        # The payload is kept on the NVTX range too.
        if kind == "json":
            sends = [
                i
                for i in np.flatnonzero(trace.mask(EventKind.USER_ANNOTATION)).tolist()
                if trace.name(i) == "ncclSend"
            ]
            assert msgspec.json.decode(trace.events.args(sends[0])["payload"])[
                "Message size [bytes]"
            ] == (SEND_BYTES)


def test_undecodable_blobs_stay_unknown(tmp_path: Path) -> None:
    path = _with_payloads(tmp_path, "blob")
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET binaryData = x'0102' WHERE binaryData IS NOT NULL")
    con.commit()
    con.close()
    with pytest.warns(UserWarning, match="could not be decoded"):
        job = NsysImporter().read([path])
    for trace in job:
        assert (trace.collectives.bytes == -1).all()
        assert (trace.collectives.group == -1).all()


def test_all_reduce_size_from_json_in_schema_3_0(tmp_path: Path) -> None:
    path = build(tmp_path / "ar.sqlite", [Proc(100, (0,), 1)])
    kernels = query(
        path,
        "SELECT r.start, r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
        "WHERE k.shortName = 5",
    )
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, domainId) "
        "VALUES (0, NULL, 75, 'NCCL', 1)"
    )
    for start, tid in kernels:
        text = msgspec.json.encode(
            {"NCCL communicator ID": 7, "Message size [bytes]": 1 << 20, "Reduction operation": 0}
        ).decode()
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, text, domainId, jsonText) "
            "VALUES (?, ?, 59, ?, 'ncclAllReduce', 1, ?)",
            (start - 100, start + 10_000, tid, text),
        )
    con.commit()
    con.close()
    trace = NsysImporter().read([path]).traces[0]
    coll = trace.collectives
    assert {trace.collective_kind(i) for i in range(len(coll))} == {CollectiveKind.ALL_REDUCE}
    assert coll.bytes.tolist() == [1048576, 1048576]
    assert [g.name for g in trace.groups] == [f"nccl:{7:016x}"]
    cats = {
        trace.strings[int(trace.events.cat[i])]
        for i in range(len(trace))
        if trace.name(i) == "ncclAllReduce"
    }
    assert cats == {"nvtx:NCCL"}


def test_gathers_scale_by_the_communicator_size() -> None:
    # NCCL reports one rank's share for all-gather (input) and reduce-scatter (output); the
    # model wants the all-gather output and the reduce-scatter input: x nranks, when known.
    call = (
        0,
        10,
        "ncclAllGather",
        payload_from_fields({"Message size [bytes]": 100, "NCCL communicator ID": 5}),
        0,
    )
    coll = Collective(0, CollectiveKind.ALL_GATHER)
    _apply(coll, [call], {5: Communicator(nranks=8)})
    assert coll.nbytes == 800
    unknown = Collective(0, CollectiveKind.ALL_GATHER)
    _apply(unknown, [call], {})
    assert unknown.nbytes == -1
    generic = Collective(0, CollectiveKind.UNKNOWN)  # ncclDevKernel_Generic: kind from the call
    _apply(generic, [call], {5: Communicator(nranks=4)})
    assert (generic.kind, generic.nbytes) == (CollectiveKind.ALL_GATHER, 400)
