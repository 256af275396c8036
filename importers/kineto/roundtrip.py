"""Reading back echo-view's own Perfetto JSON export (``exporters.perfetto_json``).

An export holds every rank of a job in one file: processes are named ``rank R GPU D`` /
``rank R CPU (pid P)``, overlapping slices sit on extra threads ``<name> (lane k)``, steps are
slices of category ``echo_view_step``, times are relative to ``baseTimeNanoseconds`` and already
shifted by the job's clock alignment, and ``metadata`` (``"generator": "echo-view"``) keeps the
alignment, world size, each rank's devices and whether the job was predicted.
:func:`split_export` cuts such a file back into one column set per rank; arrows between ranks
(collective links) are not per-rank flows and are left out (counted in the import notes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.errors import InputError
from echo_view.model import NONE, ClockAlignment, StepTable
from importers.kineto.rows import FileColumns, PointColumns

if TYPE_CHECKING:
    from importers.kineto import ParsedFile

STEP_CATEGORY = "echo_view_step"
_RANK = re.compile(r"^rank (\d+)\b")
_LANE_SUFFIX = re.compile(r"^(.*) \(lane \d+\)$")
_CPU_PID = re.compile(r"^rank \d+ CPU \(pid (.*)\)$", re.DOTALL)
_RANK_REST = re.compile(r"^rank \d+ (.*)$", re.DOTALL)
_GPU_NAME = re.compile(r"^GPU -?\d+$")
_INT = re.compile(r"-?[0-9]{1,18}")


@dataclass
class Exported:
    """An echo-view export cut into ranks."""

    pieces: list[tuple[int, FileColumns, dict[str, Any]]]
    alignment: ClockAlignment
    job_meta: dict[str, object]


def export_metadata(top: dict[str, Any]) -> dict[str, Any] | None:
    """The ``metadata`` object of an echo-view export, else ``None``."""
    meta = top.get("metadata")
    if isinstance(meta, dict) and meta.get("generator") == "echo-view":
        return meta
    return None


def _rows_subset(fc: FileColumns, rows: npt.NDArray[np.int64], threads: set[int]) -> FileColumns:
    """The rows ``rows`` of ``fc`` and the side events on ``threads``."""
    lo, hi = fc.args_offsets[rows], fc.args_offsets[rows + 1]
    lengths = hi - lo
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    blob = np.frombuffer(fc.args_blob, dtype=np.uint8)
    take = np.repeat(lo - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
    new_index = {int(r): i for i, r in enumerate(rows.tolist())}

    def points(p: PointColumns) -> PointColumns:
        keep = np.isin(p.thread, np.array(sorted(threads), dtype=np.int32))
        return PointColumns(*(getattr(p, f)[keep] for f in p.__dataclass_fields__))

    return replace(
        fc,
        phase=fc.phase[rows],
        name=fc.name[rows],
        cat=fc.cat[rows],
        thread=fc.thread[rows],
        start_ns=fc.start_ns[rows],
        dur_ns=fc.dur_ns[rows],
        correlation=fc.correlation[rows],
        external_id=fc.external_id[rows],
        index=fc.index[rows],
        async_id={new_index[r]: v for r, v in fc.async_id.items() if r in new_index},
        args_blob=blob[take].tobytes() if len(take) else b"",
        args_offsets=offsets,
        metadata=[m for m in fc.metadata if m[1] in threads],
        flows=points(fc.flows),
        ends=points(fc.ends),
    )


def _steps(fc: FileColumns, rows: npt.NDArray[np.int64], base: int) -> StepTable:
    numbers, detected = [], False
    for r in rows.tolist():
        raw = fc.args_blob[int(fc.args_offsets[r]) : int(fc.args_offsets[r + 1])]
        args = msgspec.json.decode(raw) if raw else {}
        number = args.get("step") if isinstance(args, dict) else None
        numbers.append(number if isinstance(number, int) else NONE)
        detected = detected or (isinstance(args, dict) and args.get("detected") is True)
    start = fc.start_ns[rows] + np.int64(base)
    return StepTable(
        number=np.array(numbers, dtype=np.int64),
        start_ns=start,
        end_ns=start + fc.dur_ns[rows],
        gpu_end_ns=np.full(len(rows), NONE, dtype=np.int64),
        detected=detected,
    )


def _original_pids(fc: FileColumns) -> dict[int | str, int | str]:
    """Export pid -> the pid its process name keeps: ``rank R CPU (pid P)`` -> P, ``rank R
    other`` -> ``""``, ``rank R X`` -> X (a process of neither kind; a GPU's is left alone,
    its device is in its name)."""
    out: dict[int | str, int | str] = {}
    for name, thread, args in fc.metadata:
        value = args.get("name")
        if name != "process_name" or not isinstance(value, str):
            continue
        pid = fc.threads[thread][0]
        if m := _CPU_PID.match(value):
            out[pid] = _pid_value(m.group(1))
        elif (m := _RANK_REST.match(value)) and not _GPU_NAME.match(m.group(1)):
            rest = m.group(1)
            out[pid] = "" if rest == "other" else _pid_value(rest)
    return out


def _pid_value(text: str) -> int | str:
    """A pid as the export wrote it: a number (up to 18 digits, as the importer reads them)
    or a string."""
    return int(text) if _INT.fullmatch(text) else text


def split_export(parsed: ParsedFile) -> Exported | None:
    """Cut an echo-view export into ranks (``None`` when ``parsed`` is not one)."""
    meta = export_metadata(parsed.top)
    if meta is None:
        return None
    fc = parsed.columns
    pid_rank: dict[int | str, int] = {}
    thread_names: dict[int, str] = {}
    for name, thread, args in fc.metadata:
        value = args.get("name")
        if name == "process_name" and isinstance(value, str) and (m := _RANK.match(value)):
            pid_rank[fc.threads[thread][0]] = int(m.group(1))
        elif name == "thread_name" and isinstance(value, str):
            thread_names[thread] = value
    if not pid_rank:
        raise InputError(
            "an echo-view export without 'rank R ...' process names",
            path=parsed.path,
            hint="export the job again with this version of echo-view",
        )
    # Overlap lanes "<name> (lane k)" go back onto their thread "<name>" of the same process.
    by_name = {(fc.threads[t][0], n): t for t, n in thread_names.items()}
    remap = np.arange(len(fc.threads), dtype=np.int32)
    for t, n in thread_names.items():
        m = _LANE_SUFFIX.match(n)
        if m and (fc.threads[t][0], m.group(1)) in by_name:
            remap[t] = by_name[(fc.threads[t][0], m.group(1))]
    rank_of_thread = np.array([pid_rank.get(p, NONE) for p, _ in fc.threads], dtype=np.int64)
    # The export numbered the processes; their names keep the original pids: put them back, so
    # that the job read back (and exported again) is the one exported.
    restored = {p: pid for p, pid in _original_pids(fc).items() if p in pid_rank}
    original = [(restored.get(p, p), t) for p, t in fc.threads]
    fc = replace(fc, thread=remap[fc.thread], threads=original)
    row_rank = rank_of_thread[fc.thread] if len(fc) else np.zeros(0, dtype=np.int64)
    step_sid = fc.strings.index(STEP_CATEGORY) if STEP_CATEGORY in fc.strings else NONE
    is_step = fc.cat == step_sid
    base = parsed.top.get("baseTimeNanoseconds")
    base = base if isinstance(base, int) else 0
    pieces: list[tuple[int, FileColumns, dict[str, Any]]] = []
    ws = meta.get("world_size")
    for rank in sorted(set(pid_rank.values())):
        threads = {t for t in range(len(fc.threads)) if rank_of_thread[t] == rank}
        rows = np.flatnonzero((row_rank == rank) & ~is_step)
        extra: dict[str, Any] = {
            "rank_source": "echo-view export",
            "steps": _steps(fc, np.flatnonzero((row_rank == rank) & is_step), base),
        }
        if isinstance(ws, int):
            extra["world_size"] = ws
        devices = meta.get("devices")
        if isinstance(devices, dict) and isinstance(devices.get(str(rank)), list):
            extra["device_properties"] = devices[str(rank)]
        pieces.append((rank, _rows_subset(fc, rows, threads), extra))
    al = meta.get("alignment") if isinstance(meta.get("alignment"), dict) else {}
    assert isinstance(al, dict)
    unc = al.get("uncertainty_ns")
    alignment = ClockAlignment(
        str(al.get("method", "none")),
        (0,) * len(pieces),
        unc if isinstance(unc, int) else NONE,
        "times read back from an echo-view export, which had applied the offsets"
        + (f"; {al['note']}" if al.get("note") else ""),
    )
    return Exported(pieces, alignment, {"predicted": meta.get("predicted") is True})
